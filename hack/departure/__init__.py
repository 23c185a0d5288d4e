"""One node's departure under traffic on real nodes, as the departure benchmark, the demo and
tests/test_departure_traffic.py run it: the kinds and configurations (kinds.py), each kind's
way down as a table (ways.py), the scene (scene.py: its workload's objects in objects.py,
what it samples meanwhile in trackers.py), the client's load generator it runs in the client
namespace (loadgen.py) and what one departure cost the clients (summary.py)."""
