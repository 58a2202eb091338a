{#- The salt-master's side, on its host: Saltpeter's daemon runs as the unprivileged
    user `saltpeter` and publishes through the master (docs/install.md).

    1. publisher_acl: a drop-in under master.d/ granting the user exactly the functions
       the daemon publishes (Salt merges it with publisher_acl entries of other files).
    2. Read access to the keys the master accepted (wrappers prove their minion with its
       key), through ACLs, which survive the master's chown of its pki directory at start:
       the pki directory gets r-x (mode 0750 as Salt shows it, which Salt accepts; with
       x alone it would read 0710 and the master would chmod it back to 0700 at start),
       `minions/` and its keys r, and a default ACL on `minions/` and `minions_pre/` for
       keys accepted later (`salt-key -a` moves a key from `minions_pre/`, so it keeps
       the ACL it was created with there).
    3. Traversal of the master's cache and socket directories, where the `salt` client
       of a publisher_acl user finds its key and the event bus.
    4. The master restarted only when the drop-in changed (it reads publisher_acl, and
       creates the user's key, at start). -#}
{%- from tpldir ~ "/map.jinja" import saltpeter with context %}
{%- set master = saltpeter.master %}
{%- set user = saltpeter.user %}
{%- set pki = master.pki_dir %}

include:
  - {{ tpldir }}.server

saltpeter-master-acl-tools:
  pkg.installed:
    - name: {{ master.acl_package }}

saltpeter-master-publisher-acl:
  file.serialize:
    - name: {{ master.config_dir }}/master.d/{{ master.dropin }}
    - dataset: {{ {'publisher_acl': {user: master.functions}} | json }}
    - serializer: yaml
    - user: root
    - group: root
    - mode: '0644'
    - makedirs: True
    - require:
      - pkg: saltpeter-package

{#- Directory -> permissions of the user on it. #}
{%- set access = [
    ('pki-parent', salt['file.dirname'](pki), 'x'),
    ('pki', pki, 'rx'),
    ('cache-parent', salt['file.dirname'](master.cachedir), 'rx'),
    ('cache', master.cachedir, 'rx'),
    ('sock-parent', salt['file.dirname'](master.sock_dir), 'x'),
    ('sock', master.sock_dir, 'x'),
] %}
{%- for id, path, perms in access %}

saltpeter-master-{{ id }}:
  acl.present:
    - name: {{ path }}
    - acl_type: user
    - acl_name: {{ user }}
    - perms: {{ perms }}
    - require:
      - pkg: saltpeter-master-acl-tools
      - pkg: saltpeter-package
{%- endfor %}

saltpeter-master-accepted-keys:
  acl.present:
    - name: {{ pki }}/minions
    - acl_type: user
    - acl_name: {{ user }}
    - perms: rX
    - recurse: True
    - require:
      - acl: saltpeter-master-pki

{#- The master's event bus socket is 0660 for the master's user and group; it is made
    anew at each start, so a default ACL on its directory opens it to the user. #}
saltpeter-master-event-socket:
  acl.present:
    - name: {{ master.sock_dir }}
    - acl_type: default:user
    - acl_name: {{ user }}
    - perms: rw
    - require:
      - acl: saltpeter-master-sock
{%- for dir in ['minions', 'minions_pre'] %}

saltpeter-master-new-keys-{{ dir }}:
  acl.present:
    - name: {{ pki }}/{{ dir }}
    - acl_type: default:user
    - acl_name: {{ user }}
    - perms: r
    - require:
      - acl: saltpeter-master-pki
{%- endfor %}

{%- if saltpeter.config.get('wrapper_deploy', True) %}

{#- The daemon deploys its wrapper from the master's file roots. #}
saltpeter-master-file-roots:
  file.directory:
    - name: {{ master.file_roots_dir }}
    - user: {{ user }}
    - group: {{ saltpeter.group }}
    - mode: '0755'
    - makedirs: True
    - require:
      - pkg: saltpeter-package
{%- endif %}

{%- if master.restart %}

saltpeter-master-restart:
  service.running:
    - name: {{ master.service }}
    - watch:
      - file: saltpeter-master-publisher-acl
{%- endif %}
