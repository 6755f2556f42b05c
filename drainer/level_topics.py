"""A drain's level topics are named `<topic>-<level>`: the one place that says so both ways.

At the bottom of the layers, so the store (which keys progress by level) and the Spark read
(which derives each record's level) read a level off a topic name the way the config named it.
"""

from __future__ import annotations


def level_topic(topic: str, level: int) -> str:
    return f"{topic}-{level}"


def topic_level(topic: str) -> int:
    """A level topic's level (`XYZ-3` is 3). Drain topics have no '-' of their own (config)."""
    return int(topic.rsplit("-", 1)[-1])
