"""DeletedRecords: delete_records()'s answer for a partition.

Runs in: the app process.
"""

from __future__ import annotations


class DeletedRecords:
    """The partition's ``low_watermark`` after the deletion."""

    def __init__(self, low_watermark: int) -> None:
        self.low_watermark = low_watermark
