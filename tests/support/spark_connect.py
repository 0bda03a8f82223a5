"""A local Spark Connect server for the tests: pyspark's own ``SparkConnectServer`` (its jar
ships in pyspark's ``jars``) started with ``spark-submit`` on a loopback port, stopped by its
process id at the end.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyspark

from kafkaguard.tansu import free_port

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
START_TIMEOUT_S = 180.0


@contextmanager
def spark_connect_server(log_file: Path) -> Iterator[str]:
    """Yield ``sc://127.0.0.1:PORT`` of a running server (``local[2]``, no UI)."""
    home = Path(pyspark.__file__).parent
    port = free_port()
    command = [
        str(home / "bin" / "spark-submit"),
        "--class", SERVER_CLASS, "--master", "local[2]",
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.sql.shuffle.partitions=2",
        "--conf", "spark.driver.memory=1g",
        "spark-internal",
    ]  # fmt: skip
    env = os.environ | {"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    with open(log_file, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"Spark Connect server exited: see {log_file}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"Spark Connect server not up: see {log_file}") from None
                time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}"
    finally:
        process.terminate()  # spark-class execs java: this is the server's own pid
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
