{#- The whole server side, for the salt-master's host: the packages, /etc/saltpeter,
    the service, and the master's publisher_acl and key access. Minions take
    saltpeter.wrapper. -#}
include:
  - {{ tpldir }}.server
  - {{ tpldir }}.config
  - {{ tpldir }}.master
