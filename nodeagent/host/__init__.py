"""The host integration: logind and systemd over D-Bus, the kubelet's shutdown lock, the
node lock, the preload for upgrades."""
