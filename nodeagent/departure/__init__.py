"""The node's departure: one queue and one worker own the node's fence, fed by logind,
SIGTERM and the own Node; and the pass over what the last shutdown left."""
