"""Consumer group offsets, read and committed on a session's admin client.

The mirror of committed offsets (`drainer.kafka.mirror`) is their only writer: Postgres stays
the source of truth, and the groups show lag tools (Burrow, `kafka-consumer-groups`) where each
level stands. All groups' requests are in flight together, one round trip for the lot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from drainer.errors import KafkaUnavailable
from drainer.kafka.clients import TIMEOUT_S, request_failed


@dataclass(frozen=True)
class GroupCommit:
    """One partition's offset (and its metadata: the offset map's summary) for a group."""

    topic: str
    partition: int
    offset: int
    metadata: str = ""


def read_offsets(
    admin: AdminClient, groups: Mapping[str, Iterable[tuple[str, int]]]
) -> dict[str, dict[tuple[str, int], tuple[int, str]]]:
    """group -> (topic, partition) -> (offset, metadata); offset < 0: nothing committed."""
    requests = {group: [TopicPartition(t, p) for t, p in keys] for group, keys in groups.items()}
    pending = {
        group: admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, tps)], request_timeout=TIMEOUT_S
        )[group]
        for group, tps in requests.items()
        if tps
    }
    found: dict[str, dict[tuple[str, int], tuple[int, str]]] = {g: {} for g in groups}
    for group, future in pending.items():
        try:
            answer = future.result(timeout=TIMEOUT_S + 5)
        except (KafkaException, TimeoutError) as err:
            raise request_failed(f"reading offsets of group {group}", err) from None
        for tp in answer.topic_partitions:
            if tp.error is not None:
                raise request_failed(f"reading offsets of group {group}", tp.error)
            found[group][(tp.topic, tp.partition)] = (tp.offset, tp.metadata or "")
    return found


def commit_offsets(
    admin: AdminClient, commits: Mapping[str, list[GroupCommit]]
) -> dict[str, KafkaUnavailable]:
    """Commit offsets to consumer groups, all groups at once; returns the groups that failed.

    An admin commit (AlterConsumerGroupOffsets) is what a group-less consumer's commit is: the
    same record in `__consumer_offsets`, seen by lag tools alike, refused while the group has
    active members.
    """
    pending = {
        group: admin.alter_consumer_group_offsets(
            [
                ConsumerGroupTopicPartitions(
                    group,
                    [
                        TopicPartition(c.topic, c.partition, c.offset, c.metadata)
                        for c in group_commits
                    ],
                )
            ],
            request_timeout=TIMEOUT_S,
        )[group]
        for group, group_commits in commits.items()
        if group_commits
    }
    failed: dict[str, KafkaUnavailable] = {}
    for group, future in pending.items():
        try:
            answer = future.result(timeout=TIMEOUT_S + 5)
        except (KafkaException, TimeoutError) as err:
            failed[group] = request_failed(f"committing offsets of group {group}", err)
            continue
        errors = [tp.error for tp in answer.topic_partitions if tp.error is not None]
        if errors:
            failed[group] = request_failed(f"committing offsets of group {group}", errors[0])
    return failed
