"""The agent's supervisor and wiring: loops that restart themselves, the watchdog, what feeds
what, and `nodeagent status` (it reads the fence, the drain's pod filter and the conditions,
so it sits with the wiring above them)."""
