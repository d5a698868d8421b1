"""The AdminClient facade (``client.py``), one mixin per method group (topics, configs, groups, acls) over
``base.AdminBase``, its option parsing, futures dispatcher and result builders. The public names are
kqactors.admin's.

Runs in: the app process.
"""
