"""Test support shared by the test packages (one copy of each); what the load tests run too
(the engine double, the workers and servers on it, NATS) is in harness/."""
