{#- The Saltpeter server, on the salt-master's host: the package saltpeter (which needs
    saltpeter-wrapper) and its service. The settings file restarts the service when it
    changes (several settings take effect only at start); job files do not: the daemon
    reloads them by itself. -#}
{%- from tpldir ~ "/map.jinja" import saltpeter with context %}
{%- from tpldir ~ "/macros.jinja" import package_installed %}

include:
  - {{ tpldir }}.wrapper
  - {{ tpldir }}.config

{{ package_installed('saltpeter-package', saltpeter.package) }}
    - require:
      - pkg: saltpeter-wrapper-package

{%- if saltpeter.service.manage %}

saltpeter-service:
  service.running:
    - name: {{ saltpeter.service.name }}
    - enable: True
    - require:
      - pkg: saltpeter-package
      - cmd: saltpeter-config-check
    - watch:
      - file: saltpeter-settings
{%- endif %}
