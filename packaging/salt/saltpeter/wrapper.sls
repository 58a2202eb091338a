{#- Minions: the package saltpeter-wrapper, so the daemon runs jobs there without
    deploying its wrapper (with `wrapper_deploy: false` in the settings, the default of
    this formula). -#}
{%- from tpldir ~ "/map.jinja" import saltpeter with context %}
{%- from tpldir ~ "/macros.jinja" import package_installed %}

{{ package_installed('saltpeter-wrapper-package', saltpeter.wrapper) }}

saltpeter-wrapper-binary:
  file.exists:
    - name: {{ saltpeter.wrapper.path }}
    - require:
      - pkg: saltpeter-wrapper-package
