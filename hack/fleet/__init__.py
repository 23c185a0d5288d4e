"""A fleet of resident agents on one API server, as the fleet benchmark (bench/fleet.py) and
tests/test_fleet.py run it: the fleet's nodes, start storm and evacuation wave (scene.py),
the agents as supervised processes (residents.py), what they ask of the API server from its
audit log (apiusage.py), and API Priority and Fairness rejecting them on purpose (apf.py)."""
