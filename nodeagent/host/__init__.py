"""The host integration: the system bus (dbus), systemd's manager (systemd_manager), logind
and the agent's delay inhibitor (logind, logindconf), the kubelet's inhibitor
(kubeletshutdown), the one-agent-per-node claim (nodeclaim), the preload for upgrades."""
