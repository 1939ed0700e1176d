"""Functions forward mode differentiates as calls (those on a cycle of the call graph:
recursive functions, never inlined): for each callee and activity pattern, one tangent
function, generated once however many sites call it.

``RT @tan(<callee arguments>, <k tangents per varied float argument>, <k shadows per
shadowed pointer argument>)`` runs the callee and its tangents, as a kernel's tangent
function does; the tangents of what it writes go into the shadows it is given (a Numba
function's float result too: its return slot is a shadowed pointer).  A float result the
caller differentiates (a C function's) comes back as ``{ T, k tangents }``.  Shadows of the
callee's own allocations are freed when it returns, so a callee may not hand out a
pointer (as the reverse mode's calls may not).
"""
from .generator import ForwardSpec, TangentGenerator, returned_type
from ..numba_abi import python_name
from ..reverse.callees import Callees


class ForwardCallees(Callees):
    """The functions a tangent function calls, with ``lanes`` tangents per value, and the
    tangent functions generated for them; ``prefix`` names the generated symbols."""

    def __init__(self, module, rule_of, context, prefix, lanes, locations=None):
        super().__init__(module, rule_of, context, prefix, locations)
        self.lanes, self.symbols = lanes, {}

    def request(self, name, active, shadowed, ret_active):
        """The symbol of callee ``name``'s tangent function for one activity pattern
        (generated later, by :meth:`generate`)."""
        key = (name, active, shadowed, ret_active)
        if key not in self.symbols:
            self.symbols[key] = f"{self.prefix}.tan.{len(self.symbols)}"
            self.queue.append(key)
        return self.symbols[key]

    def _generator(self, key):
        name, active, shadowed, ret_active = key
        ret_type = self.return_type(name)
        spec = ForwardSpec(self.symbols[key], python_name(name), self.lanes, list(active),
                           [(k, ["ptr"], 0) for k in shadowed], len(shadowed), None, None, None,
                           return_type=returned_type(ret_type, self.lanes) if ret_active else ret_type)
        return TangentGenerator(self.function(name), spec, self.analyses(name, active, shadowed, ret_active),
                                self.context, callees=self)
