"""The runtime core: the daemon's decisions, without its I/O.

`RuntimeCore.handle(stimulus)` takes one thing that happened to the daemon (a client
message, a channel message, a timer tick, a lost process, an operator command; each a frozen
dataclass of `safemon.runtime.stimuli` carrying a `stimulus_id`) and returns what the shell
must do about it, in order (`safemon.runtime.effects`: send to a channel, reply to a
client, restart or isolate a channel, publish an event, run the hook, log; each carrying
the `stimulus_id` that caused it). The clock is injected. The core owns the roles (voter,
DTI scheduler, safe-state controller, fault classifier), the requests in flight, the weight
store and its delivery to the channels; the shell (`safemon.daemon`) owns sockets, the poll
loop, processes and the metrics HTTP endpoint.
"""

from safemon.runtime import effects, stimuli
from safemon.runtime.core import RuntimeCore
from safemon.runtime.support import GoldenPatternLike, ProcessView

__all__ = ["GoldenPatternLike", "ProcessView", "RuntimeCore", "effects", "stimuli"]
