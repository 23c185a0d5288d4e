"""One node's departure under traffic on real nodes, as the departure benchmark, the demo and
tests/test_departure_traffic.py run it: the kinds and configurations (kinds.py), the scene
(scene.py), the client's load generator it runs in the client namespace (loadgen.py) and what
one departure cost the clients (summary.py)."""
