"""The agent's supervisor and wiring: loops that restart themselves, the watchdog, and
what feeds what."""
