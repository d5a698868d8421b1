"""The client handle (``handle.py``) and the cluster metadata it returns (``metadata.py``).

Runs in: the app process. Owns nothing itself: it gathers what every client facade shares (see handle.py).
"""

from kqactors.client.handle.handle import ClientHandle, timeout_seconds
from kqactors.client.handle.metadata import (
    BrokerMetadata,
    ClusterMetadata,
    PartitionMetadata,
    TopicMetadata,
    request_metadata,
)

__all__ = ["BrokerMetadata", "ClientHandle", "ClusterMetadata", "PartitionMetadata", "TopicMetadata",
           "request_metadata", "timeout_seconds"]
