"""Building a jar from Java source with the JDK's `javac` against pyspark's own jars: how a
sink that runs code in the Spark server's JVM ships it (`Sink.server_jar`)."""

from __future__ import annotations

import importlib.util
import logging
import shutil
import subprocess
import tempfile
from pathlib import Path

from drainer.errors import ServiceError

log = logging.getLogger(__name__)


def pyspark_jars() -> Path:
    """The installed pyspark's own jars (its `jars/` folder), found without importing it."""
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations))) / "jars"


def has_jdk() -> bool:
    return shutil.which("javac") is not None and shutil.which("jar") is not None


def compile_jar(source: Path, classpath: list[Path], built: Path) -> None:
    """`source` compiled with the JDK's javac against `classpath` into the jar `built`;
    ServiceError with javac's words if it fails (a JDK on PATH: `has_jdk`)."""
    javac, jar_tool = shutil.which("javac") or "javac", shutil.which("jar") or "jar"
    with tempfile.TemporaryDirectory(prefix="drainer-jar-") as tmp:
        classes = Path(tmp) / "classes"
        steps = [
            [
                javac,
                "-nowarn",
                "-d",
                str(classes),
                "-cp",
                ":".join(map(str, classpath)),
                str(source),
            ],
            [jar_tool, "cf", str(Path(tmp) / built.name), "-C", str(classes), "."],
        ]
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True)
            if done.returncode != 0:
                raise ServiceError(
                    f"building {built.name} from {source.name} failed ({Path(step[0]).name}): "
                    f"{(done.stderr or done.stdout).strip()[-2000:]}"
                )
        built.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(Path(tmp) / built.name), built)
    log.info("built %s", built)
