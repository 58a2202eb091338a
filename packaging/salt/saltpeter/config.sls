{#- /etc/saltpeter from the pillar: the settings file (`saltpeter_config`, and
    `saltpeter_maintenance` when given) and one file per job group. Files may hold
    secrets (API token, jobs' env): root:saltpeter 0640, and their changes are not
    shown in the state's output. -#}
{%- from tpldir ~ "/map.jinja" import saltpeter with context %}
{%- set dir = saltpeter.config_dir %}
{%- set settings = {'saltpeter_config': saltpeter.config} %}
{%- if saltpeter.maintenance %}
{%-   do settings.update({'saltpeter_maintenance': saltpeter.maintenance}) %}
{%- endif %}

include:
  - {{ tpldir }}.server

saltpeter-config-dir:
  file.directory:
    - name: {{ dir }}
    - user: root
    - group: {{ saltpeter.group }}
    - mode: '0750'
    - require:
      - pkg: saltpeter-package

saltpeter-settings:
  file.serialize:
    - name: {{ dir }}/{{ saltpeter.settings_file }}
    - dataset: {{ settings | json }}
    - serializer: yaml
    - user: root
    - group: {{ saltpeter.group }}
    - mode: '0640'
    - show_changes: False
    - require:
      - file: saltpeter-config-dir

{%- for group, jobs in saltpeter.jobs | dictsort %}

saltpeter-jobs-{{ group }}:
  file.serialize:
    - name: {{ dir }}/{{ group }}.yaml
    - dataset: {{ jobs | json }}
    - serializer: yaml
    - user: root
    - group: {{ saltpeter.group }}
    - mode: '0640'
    - show_changes: False
    - require:
      - file: saltpeter-config-dir
    - onchanges_in:
      - cmd: saltpeter-config-check
{%- endfor %}

{%- if not saltpeter.example_job %}

saltpeter-example-job-absent:
  file.absent:
    - name: {{ dir }}/example.yaml
    - require:
      - pkg: saltpeter-package
{%- endif %}

{#- Errors in what was written, in the state's result (the daemon keeps the last good
    version of a file that has errors). #}
saltpeter-config-check:
  cmd.run:
    - name: saltpeterctl config check {{ dir }}
    - onchanges:
      - file: saltpeter-settings
