"""Consumer group offsets: read with a consumer of each group, committed on the admin client.

The mirror of committed offsets (`drainer.lifecycle.mirror`) is their only writer: Postgres stays
the source of truth, and the groups show lag tools (Burrow, `kafka-consumer-groups`) where each
level stands. All groups' commits are in flight together, one round trip for the lot.

Reads go through `Consumer.committed` of a consumer configured with the group (it never
subscribes, so it never joins the group), one request per group, all in flight together, not
through the admin client's `list_consumer_group_offsets`: librdkafka (2.16, and its master as
of 2026-07) answers an admin OffsetFetch refused with NOT_COORDINATOR by re-querying a consumer
group the admin client does not have, a null pointer, and the process dies with SIGSEGV
(librdkafka#5040). A fresh broker whose `__consumer_offsets` is still loading, or a coordinator
moving in a rolling restart, is enough. A group's consumer handles those refusals; what it still
returns is retried.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from drainer.errors import KafkaUnavailable
from drainer.kafka.clients import TIMEOUT_S, request_failed, retry_passing


@dataclass(frozen=True)
class GroupCommit:
    """One partition's offset (and its metadata: the offset map's summary) for a group."""

    topic: str
    partition: int
    offset: int
    metadata: str = ""


def read_offsets(
    consumer_of: Callable[[str], Consumer],
    groups: Mapping[str, Iterable[tuple[str, int]]],
    address: str,
) -> dict[str, dict[tuple[str, int], tuple[int, str]]]:
    """group -> (topic, partition) -> (offset, metadata); offset < 0: nothing committed.

    `consumer_of(group)` is a consumer configured with that group (the session keeps one per
    group); see the module's docstring for why not the admin client. `address`: the brokers',
    for the error when they do not answer.
    """
    asked = {group: [TopicPartition(t, p) for t, p in keys] for group, keys in groups.items()}
    readers = {group: consumer_of(group) for group, tps in asked.items() if tps}  # made here
    answers: dict[str, list[TopicPartition]] = {}
    if readers:
        # one request per group, all in flight together (a group's coordinator answers its
        # own): a 3-level drain's mirror read 0.125 s one after the other, 0.066 s at once
        with ThreadPoolExecutor(len(readers), thread_name_prefix="drainer-groups") as pool:
            pending = {
                g: pool.submit(_committed, r, g, asked[g], address) for g, r in readers.items()
            }
            answers = {group: future.result() for group, future in pending.items()}
    return {
        group: {
            (tp.topic, tp.partition): (tp.offset, tp.metadata or "")
            for tp in answers.get(group, [])
        }
        for group in asked
    }


def _committed(
    consumer: Consumer, group: str, tps: list[TopicPartition], address: str
) -> list[TopicPartition]:
    try:
        answer: list[TopicPartition] = retry_passing(
            lambda: consumer.committed(tps, timeout=TIMEOUT_S)
        )
    except KafkaException as err:
        raise request_failed(f"reading offsets of group {group}", err, address) from None
    for tp in answer:
        if tp.error is not None:
            raise request_failed(f"reading offsets of group {group}", tp.error, address)
    return answer


def commit_offsets(
    admin: AdminClient, commits: Mapping[str, list[GroupCommit]], address: str
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
            failed[group] = request_failed(f"committing offsets of group {group}", err, address)
            continue
        errors = [tp.error for tp in answer.topic_partitions if tp.error is not None]
        if errors:
            failed[group] = request_failed(
                f"committing offsets of group {group}", errors[0], address
            )
    return failed
