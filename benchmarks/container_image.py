"""What does `biorank cluster image` cost from nothing, how large is the image, and how soon does a container answer?

For each engine version it removes the image and its Debian base from Docker, then times the build: the base
(debootstrap from the Debian mirror apt uses, then `docker import`) and the image (the local node's Maven
Central distribution assembled from the download cache, then `docker build`); then a rebuild with nothing
changed; then a container of it from `docker run` to a green single-node cluster.

    python -m benchmarks.container_image                 # both engine versions, from nothing
    python -m benchmarks.container_image --version 2.19.1
"""

from __future__ import annotations

import os
import time
import urllib.request

from benchmarks import suite
from biorank.cluster import artifacts
from biorank.cluster.image import REPOSITORY, base_for, build_image, docker_client
from biorank.cluster.layout import free_port

COLUMNS = suite.columns(("version", "OpenSearch"), ("java", "Java"), ("base_s", "base s", ".0f"),
                        ("image_s", "image s", ".0f"), ("rebuild_s", "rebuild s", ".1f"),
                        ("base_mb", "base MB", ".0f"), ("image_mb", "image MB", ".0f"),
                        ("green_s", "run → green s", ".1f"))


def _green_after(image: str) -> float:
    """Seconds from ``docker run`` to a green single-node cluster."""
    port = free_port()
    started = time.monotonic()
    container = docker_client().containers.run(image, detach=True, ports={"9200": ("127.0.0.1", port)})
    try:
        while time.monotonic() - started < 300:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_cluster/health?wait_for_status=green&"
                                            "timeout=1s", timeout=3) as r:
                    if b'"green"' in r.read():
                        return time.monotonic() - started
            except OSError:
                time.sleep(0.2)
        raise SystemExit(f"{image} did not answer green in 300 s")
    finally:
        container.remove(force=True, v=True)


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__, cluster=False)
    parser.add_argument("--version", choices=list(artifacts.ENGINES), action="append",
                        help="engine version (repeat; default: every one)")
    parser.add_argument("--keep", action="store_true", help="keep the images there are: time a cached build")
    args = parser.parse_args(argv)
    client = docker_client()
    suite.header(f"Docker {client.version()['Version']}, from {'cache' if args.keep else 'nothing'}")
    load_before = os.getloadavg()[0]
    rows = []
    for version in args.version or list(artifacts.ENGINES):
        engine = artifacts.engine(version)
        base = base_for(engine)
        if not args.keep:
            for name in (f"{REPOSITORY}:{version}", base.tag):
                if client.images.list(name=name):
                    client.images.remove(name, force=True)
        built = build_image(version, echo=lambda line: print(f"  {line}", flush=True))
        again = build_image(version, echo=lambda line: None)
        rows.append({"version": version, "java": f"{base.java_major} ({base.suite})",
                     "base_s": round(built.base_seconds or 0.0, 1),
                     "image_s": round(built.seconds - (built.base_seconds or 0.0), 1),
                     "rebuild_s": round(again.seconds, 2),
                     "base_mb": round(client.images.get(base.tag).attrs["Size"] / 1e6),
                     "image_mb": round(built.size_bytes / 1e6), "green_s": round(_green_after(built.tags[0]), 1)})
    load = (round(load_before, 1), round(os.getloadavg()[0], 1))
    suite.record(args, COLUMNS, rows, settings={"versions": [r["version"] for r in rows], "fresh": not args.keep,
                                                "load_average": load},
                 notes=f"Maven artifacts from the download cache (the local node's; a first download adds them), the "
                       f"Debian mirror over the network; 1-minute load average {load[0]} at the start, {load[1]} at "
                       f"the end, on {os.cpu_count()} CPUs", extra_versions=("docker", "testcontainers"))


if __name__ == "__main__":
    main()
