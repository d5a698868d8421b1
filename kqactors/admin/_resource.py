"""ResourceType and ResourcePatternType (ACLs and configs name resources by these; librdkafka's numbering,
which is also the protocol's).

Runs in: the app process.
"""

from __future__ import annotations

from kqactors.admin._util import OrderedEnum

RESOURCE_UNKNOWN = 0
RESOURCE_ANY = 1
RESOURCE_TOPIC = 2
RESOURCE_GROUP = 3
RESOURCE_BROKER = 4
RESOURCE_TRANSACTIONAL_ID = 5


class ResourceType(OrderedEnum):
    """The kind of a Kafka resource."""

    UNKNOWN = RESOURCE_UNKNOWN  #: not known or not set
    ANY = RESOURCE_ANY  #: any resource (filters)
    TOPIC = RESOURCE_TOPIC  #: a topic, named by its name
    GROUP = RESOURCE_GROUP  #: a group, named by its group.id
    BROKER = RESOURCE_BROKER  #: a broker, named by its id
    TRANSACTIONAL_ID = RESOURCE_TRANSACTIONAL_ID  #: a transactional id


class ResourcePatternType(OrderedEnum):
    """How a resource name matches."""

    UNKNOWN = 0  #: not known or not set
    ANY = 1  #: any pattern (filters)
    MATCH = 2  #: pattern matching (filters)
    LITERAL = 3  #: the name itself
    PREFIXED = 4  #: every name starting with it
