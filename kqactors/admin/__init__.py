"""kqactors.admin: the AdminClient and its value types, under confluent_kafka.admin's names, so that
``from kqactors.admin import AdminClient, NewTopic`` is a drop-in.

Runs in: the app process. The value types are plain classes (one module each, as confluent-kafka's); the
AdminClient (kqactors.client.admin) and list_topics()' metadata classes (kqactors.client.handle.metadata) are
imported on first use, so importing the types starts no runtime and loads no pyzmq.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kqactors.admin._acl import AclBinding, AclBindingFilter, AclOperation, AclPermissionType
from kqactors.admin._cluster import DescribeClusterResult
from kqactors.admin._config import (
    CONFIG_SOURCE_DEFAULT_CONFIG,
    CONFIG_SOURCE_DYNAMIC_BROKER_CONFIG,
    CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG,
    CONFIG_SOURCE_DYNAMIC_TOPIC_CONFIG,
    CONFIG_SOURCE_GROUP_CONFIG,
    CONFIG_SOURCE_STATIC_BROKER_CONFIG,
    CONFIG_SOURCE_UNKNOWN_CONFIG,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)
from kqactors.admin._group import (
    ConsumerGroupDescription,
    ConsumerGroupListing,
    ListConsumerGroupsResult,
    MemberAssignment,
    MemberDescription,
)
from kqactors.admin._listoffsets import ListOffsetsResultInfo, OffsetSpec
from kqactors.admin._metadata import GroupMember, GroupMetadata
from kqactors.admin._records import DeletedRecords
from kqactors.admin._resource import (
    RESOURCE_ANY,
    RESOURCE_BROKER,
    RESOURCE_GROUP,
    RESOURCE_TOPIC,
    RESOURCE_TRANSACTIONAL_ID,
    RESOURCE_UNKNOWN,
    ResourcePatternType,
    ResourceType,
)
from kqactors.admin._scram import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialDeletion,
    UserScramCredentialsDescription,
    UserScramCredentialUpsertion,
)
from kqactors.admin._topic import NewPartitions, NewTopic, TopicDescription
from kqactors.errors import KafkaError, KafkaException
from kqactors.message import OFFSET_INVALID

if TYPE_CHECKING:
    from kqactors.client.admin.client import AdminClient
    from kqactors.client.handle.metadata import (
        BrokerMetadata,
        ClusterMetadata,
        PartitionMetadata,
        TopicMetadata,
    )

__all__ = [
    "AclBinding", "AclBindingFilter", "AclOperation", "AclPermissionType", "AdminClient", "AlterConfigOpType",
    "BrokerMetadata", "CONFIG_SOURCE_DEFAULT_CONFIG", "CONFIG_SOURCE_DYNAMIC_BROKER_CONFIG",
    "CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG", "CONFIG_SOURCE_DYNAMIC_TOPIC_CONFIG", "CONFIG_SOURCE_GROUP_CONFIG",
    "CONFIG_SOURCE_STATIC_BROKER_CONFIG", "CONFIG_SOURCE_UNKNOWN_CONFIG", "ClusterMetadata", "ConfigEntry",
    "ConfigResource", "ConfigSource", "ConsumerGroupDescription", "ConsumerGroupListing", "DeletedRecords",
    "DescribeClusterResult", "GroupMember", "GroupMetadata", "KafkaError", "KafkaException",
    "ListConsumerGroupsResult", "ListOffsetsResultInfo", "MemberAssignment", "MemberDescription", "NewPartitions",
    "NewTopic", "OFFSET_INVALID", "OffsetSpec", "PartitionMetadata", "RESOURCE_ANY", "RESOURCE_BROKER",
    "RESOURCE_GROUP", "RESOURCE_TOPIC", "RESOURCE_TRANSACTIONAL_ID", "RESOURCE_UNKNOWN", "ResourcePatternType",
    "ResourceType", "ScramCredentialInfo", "ScramMechanism", "TopicDescription", "TopicMetadata",
    "UserScramCredentialAlteration", "UserScramCredentialDeletion", "UserScramCredentialUpsertion",
    "UserScramCredentialsDescription",
]

_METADATA = ("BrokerMetadata", "ClusterMetadata", "PartitionMetadata", "TopicMetadata")


def __getattr__(name: str) -> Any:
    """The AdminClient and the metadata classes, imported (with the runtime and pyzmq) when first used."""
    if name == "AdminClient":
        from kqactors.client.admin.client import AdminClient

        return AdminClient
    if name in _METADATA:
        from kqactors.client.handle import metadata

        return getattr(metadata, name)
    raise AttributeError(f"module 'kqactors.admin' has no attribute {name!r}")
