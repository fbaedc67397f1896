"""`--profile nntrainer`: the tensor and weight pools nntrainer 0.6.0 plans for one training step.

Checked byte for byte against the real library (nntrainer 0.6.0, commit 65dccdec8; the measured
fixtures in tests/fixtures/nntrainer: every request's bytes, validity and offset, both pools, both
planners). The rules below are nntrainer's own (`network_graph.cpp` setExecutionOrder,
inPlaceOptimize, finalizeContext, computeBackwardEnd; `manager.cpp` requestInputs, requestWeights,
requestTensors; `tensor_pool.cpp` finalize; each layer's `finalize`):

Nodes (nntrainer's layers): one `input` layer per model input, then the ops in file order. A fused
activation becomes its own `activation` layer after its op (nntrainer's `…/activation_realized`). An
output read by several connections gets a `multiout` layer right after its producer, one output per
reader in reading order. The loss is the last layer: with `--loss cce` the model's final Softmax
(Sigmoid) and the loss become one `cross_softmax` (`cross_sigmoid`) layer reading the Softmax's input;
with `mse` an `mse` layer reads the model output; with no loss named, cce for a model ending in a
Softmax or Sigmoid (nntrainer's classifier setup), else mse (`nntrainer_loss`). Forward order: nntrainer's topological sort (a
depth-first walk, see `sort_like_nntrainer`). Layers: conv2d, fully_connected, pooling2d (max, average;
Mean over both spatial axes is global_average, ONNX GlobalMaxPool global_max), addition, activation
(relu, sigmoid, tanh, softmax), flatten / reshape, batch_normalization.

Execution orders: forward = node index; backward from the last node with a counter starting at the
node count: CG = k, k += 1 if the node is trainable, CD = k, k += 1 if trainable, AG = k, k += 1.
Every layer is trainable (nntrainer's property defaults to true, weights or not) except a weighted op
the setup freezes.

Requests, in nntrainer's order per node: inputs, outputs, the layer's own tensors, weight gradients
(weights go to the weight pool). Lifespan bits add the node's orders: F, CG, CD, AG.
- input i: a view of its producer's output, FORWARD_GRAD (F, CG); FORWARD_FUNC for activation,
  multiout, batch_normalization and frozen layers; FORWARD_DERIV for the loss. Its gradient: a view
  of the producer's output gradient, CALC_DERIV. A model input is a placeholder (not planned).
- output: FORWARD_FUNC (activation: FORWARD_DERIV); the loss output also lives at the last forward
  order. Its gradient CALC_GRAD_DERIV; the loss's is a placeholder (the label).
- in place (only with memory_optimization on): input, activation and batch_normalization layers
  (NON_RESTRICTING) unless an input comes from a RESTRICTING layer; reshape (flatten) and multiout
  layers (RESTRICTING). An in-place output and its gradient are views of input 0's (multiout: the
  gradients stay its own).
- layer tensors: pooling2d `helper_idx` (output-sized, global max: input-sized) ITERATION;
  batch_normalization `moviing_mean_backup`, `moviing_variance_backup`, `invstd`, `cvar` (C floats)
  and `deviation` (input-sized) ITERATION, `tensor_full` (input-sized) CALC_DERIV, `tensor_reduced`
  (C floats) FORWARD_DERIV. CG and AG only count for a trainable layer.
- weights: MAX in the weight pool (conv2d filter, bias; fully_connected weight, bias;
  batch_normalization moving_mean, moving_variance, gamma, beta); a trainable layer's gradients of
  the weights that learn (not the moving statistics): (CG, AG) in the tensor pool; optimizer state
  (Adam 2, SGD none; 0.6.0 has no momentum) per learning weight, after every weight, MAX.
- validity: [min, max] of the orders within [0, end], the whole range for MAX; a request with no
  order in range is not planned. `end`: with memory_optimization on, the apply-gradient order of the
  layer whose backward runs last (computeBackwardEnd: the largest CG among layers that compute a
  gradient or a derivative); off, the first layer's (backwarding runs down to the input layer).
- views share their source's bytes; each element is 4 bytes (nntrainer trains FP32); no alignment.
Planners: `memory_optimization` on (nntrainer's default): OptimizedV1 for both pools; off:
BasicPlanner (`--nntrainer-memory-optimization off`). Ops without an nntrainer 0.6.0 layer modelled
here, depthwise / grouped convolutions (0.6.0 has no implementation), several model outputs and
ops with several outputs are refused in one line (`refusal`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from memplan_cli import ops
from memplan_cli.buffers import Buffer, BufferList, Pool, Step
from memplan_cli.errors import UnsupportedOpError
from memplan_cli.ops.loss import LOSS_TYPE

# lifespan bits (nntrainer tensor_wrap_specs.h)
FORWARD, CALC_DERIV, CALC_GRAD, CALC_AGRAD = 0b1, 0b10, 0b100, 0b1000
LIFESPAN_NAMES = {
    0b1: "FORWARD_FUNC", 0b10: "CALC_DERIV", 0b100: "CALC_GRAD", 0b1000: "CALC_AGRAD",
    0b110: "CALC_GRAD_DERIV", 0b1110: "BACKWARD_FUNC", 0b101: "FORWARD_GRAD",
    0b1101: "FORWARD_GRAD_AGRAD", 0b11: "FORWARD_DERIV", 0b111: "FORWARD_GRAD_DERIV",
    0b1111: "ITERATION", 0b1111111: "MAX",
}
FORWARD_GRAD, FORWARD_DERIV, CALC_GRAD_DERIV = 0b101, 0b11, 0b110
ITERATION, BACKWARD_FUNC, MAX = 0b1111, 0b1110, 0b1111111
ELEMENT = 4  # FP32
NAIVE_NNTRAINER = ("every tensor nntrainer requests its own bytes; its views (in-place activation, batch "
                   "normalization, flatten and multiout outputs) share their source's bytes")

# Each op family declares the nntrainer 0.6.0 layer this profile models its ops as (memplan_cli/ops/:
# `OpDef.profiles["nntrainer"]`): "layer" (its name; every op without one is refused), "kind" (the
# layer type this profile models in detail: conv2d, fully_connected, pooling2d, addition, reshape,
# batch_normalization, activation), "check": fn(graph, op, batchnorm) -> why the layer cannot take
# this op, "cannot_train": fn(graph, op) -> what convolution nntrainer itself cannot train,
# "cross_entropy": the loss a model-ending op fuses into; an op without a "kind" may declare
# "in_place" and "weights" (bools), modelled with nntrainer's default requests.
WEIGHT_NAMES = {"conv2d": ("filter", "bias"), "fully_connected": ("weight", "bias")}
# batch_normalization's weights in nntrainer's order, as ONNX input positions, and whether they learn
BN_WEIGHTS = (("moving_mean", 3, False), ("moving_variance", 4, False), ("gamma", 1, True), ("beta", 2, True))
NON_RESTRICTING = {"input", "activation", "batch_normalization"}
RESTRICTING = {"reshape", "multiout"}

DEFAULT_PLANNER = "nntrainer-v1"
PLANNERS = {True: "nntrainer-v1", False: "nntrainer-basic"}


def lifespan_name(bits: int) -> str:
    return LIFESPAN_NAMES.get(bits, f"0b{bits:b}")


@dataclass
class Node:
    name: str
    kind: str  # nntrainer layer type
    type: str  # memplan op type ("Input", "MultiOut", "Loss" for the layers nntrainer adds)
    op: int  # forward op index in the graph (-1: a layer nntrainer adds)
    inputs: list  # (node index, output slot) per input connection
    outputs: list  # operand index per output slot (gives its shape)
    trainable: bool
    weights: list = field(default_factory=list)  # (operand index, nntrainer name, learns)
    orders: tuple = (0, 0, 0, 0)  # (forward, calcGradient, calcDerivative, applyGradient)


def fused_activation(op) -> str:
    for key in ("fused_activation", "fused_activation_function", "activation"):
        v = op.attrs.get(key)
        if isinstance(v, str) and v.upper() not in ("", "NONE"):
            return v.upper()
    return "NONE"


def _all_facts(op_type: str) -> dict:
    return ops.profile_facts("nntrainer", op_type) or {}


def _facts(op_type: str) -> dict | None:
    f = _all_facts(op_type)
    return f if f.get("layer") else None


def _kind(op_type: str) -> str | None:
    return _all_facts(op_type).get("kind")


def _cross_entropy(op) -> str | None:
    """The cross-entropy loss nntrainer fuses a model-ending op into (cross_softmax, cross_sigmoid)."""
    return _all_facts(op.type).get("cross_entropy")


def fused_to_op() -> dict:
    """Fused activation -> the op type of the activation layer nntrainer realizes it as."""
    return {d.activation: t for t, d in ops.all_ops().items() if d.activation and _kind(t) == "activation"}


def refusal(graph, loss: str = "mse", batchnorm: str = "train") -> str | None:
    """Why nntrainer 0.6.0 (as this profile models it) cannot train the graph; None when it can. What
    the library itself cannot train (depthwise / grouped convolutions) is named before what the
    profile does not model."""
    for op in graph.operations:
        cannot = _all_facts(op.type).get("cannot_train")
        what = cannot(graph, op) if cannot is not None else None
        if what:
            return (f"nntrainer profile: op {op.label} is {what} convolution: nntrainer 0.6.0 cannot train it "
                    f"(conv2d has no groups; its depthwise_conv2d layer has no implementation)")
    for op in graph.operations:
        if _facts(op.type) is None:
            return (f"nntrainer profile: op {op.label} ({op.type}) has no nntrainer layer memplan models "
                    f"(its tensor requests are unknown)")
        act = fused_activation(op)
        if act != "NONE" and act not in fused_to_op():
            return f"nntrainer profile: op {op.label} has a fused activation {act} nntrainer does not have"
        if len(op.outputs) != 1:
            return f"nntrainer profile: op {op.label} ({op.type}) has {len(op.outputs)} outputs; the profile models one"
        check = _facts(op.type).get("check")
        why = check(graph, op, batchnorm) if check is not None else None
        if why:
            return why
    outs = [o for o in graph.outputs if not any(op.type == LOSS_TYPE and o in op.outputs for op in graph.operations)]
    if len(graph.outputs) > 1:
        return (f"nntrainer profile: the model has {len(graph.outputs)} outputs; the profile models one output "
                f"and its loss")
    if loss == "cce" and outs:
        p = next((op for op in graph.operations if outs[0] in op.outputs), None)
        if p is None or not _cross_entropy(p) or fused_activation(p) != "NONE":
            return ("nntrainer profile: nntrainer's cross-entropy loss needs the model to end in a Softmax or "
                    "Sigmoid (it fuses them into cross_softmax / cross_sigmoid)")
    return None


def _weights(graph, op, kind) -> list:
    def is_w(i):
        if i < 0:
            return False
        o = graph.operands[i]
        return o.is_const and not o.computed and o.dtype.startswith(("float", "bfloat"))

    if kind == "batch_normalization":
        return [(op.inputs[p], n, learns) for n, p, learns in BN_WEIGHTS]
    if kind in WEIGHT_NAMES:
        ws = [i for i in op.inputs[1:3] if is_w(i)]
        return [(i, WEIGHT_NAMES[kind][j], True) for j, i in enumerate(ws)]
    if (_facts(op.type) or {}).get("weights"):
        return [(i, graph.operands[i].name, True) for i in dict.fromkeys(op.inputs) if is_w(i)]
    return []


def build_nodes(graph, trainable_ops: set[int], loss: str = "mse") -> list[Node]:
    """nntrainer's layers for a forward graph (see module doc), with their execution orders."""
    ops = graph.operations
    producer = {o: op.index for op in ops for o in op.outputs}
    given_loss = next((op for op in ops if op.type == LOSS_TYPE), None)
    loss_in = given_loss.inputs[0] if given_loss is not None else graph.outputs[0]
    merged = None
    if loss == "cce" and loss_in in producer and _cross_entropy(ops[producer[loss_in]]):
        merged = ops[producer[loss_in]]
    skip = {op.index for op in (merged, given_loss) if op is not None}
    loss_reads = merged.inputs[0] if merged is not None else loss_in
    walk = [k for k in graph.topological_order() if k not in skip]
    # connections in reading order: (reader, position) per non-constant input; the loss reads last
    readers: dict[int, list] = {}
    for k in walk:
        for pos, i in enumerate(ops[k].inputs):
            if i >= 0 and not graph.operands[i].is_const:
                readers.setdefault(i, []).append((k, pos))
    readers.setdefault(loss_reads, []).append(("loss", 0))
    nodes: list[Node] = []
    out_of: dict[int, tuple] = {}  # operand -> (node index, slot) that holds it
    multi: dict[int, int] = {}  # operand -> its multiout node

    def produced(o, label):
        out_of[o] = (len(nodes) - 1, 0)
        if len(readers.get(o, ())) > 1:
            nodes.append(Node(f"{label}/generated_out_0", "multiout", "MultiOut", -1, [out_of[o]],
                              [o] * len(readers[o]), True))
            multi[o] = len(nodes) - 1

    def source(o, conn):
        if o in multi:
            return multi[o], readers[o].index(conn)
        return out_of[o]

    for i in graph.inputs:
        if i in readers and i not in producer:
            nodes.append(Node(graph.operands[i].name or f"input{i}", "input", "Input", -1, [], [i], True))
            produced(i, nodes[-1].name)
    for k in walk:
        op = ops[k]
        kind = _kind(op.type) or (_facts(op.type) or {}).get("layer", op.type)
        label = op.name or f"{op.type}{k}"
        ins = [source(i, (k, pos)) for pos, i in enumerate(op.inputs) if i >= 0 and not graph.operands[i].is_const]
        weights = _weights(graph, op, kind)
        tr = k in trainable_ops if weights else True
        nodes.append(Node(label, kind, op.type, k, ins, list(op.outputs), tr, weights))
        act = fused_activation(op)
        if act != "NONE":
            nodes.append(Node(f"{label}/activation_realized", "activation", fused_to_op()[act], -1,
                              [(len(nodes) - 1, 0)], list(op.outputs), True))
        produced(op.outputs[0], label)
    kind = _cross_entropy(merged) if merged is not None else "mse"
    out = merged.outputs[0] if merged is not None else loss_in
    nodes.append(Node(f"{kind}0", "loss", LOSS_TYPE, merged.index if merged is not None else -1,
                      [source(loss_reads, ("loss", 0))], [out], True))
    nodes = sort_like_nntrainer(nodes)
    set_execution_orders(nodes)
    return nodes


def sort_like_nntrainer(nodes: list[Node]) -> list[Node]:
    """GraphCore::topologicalSort: reverse post-order of a depth-first walk from each unvisited layer
    in list order, a layer's consumers taken in list order. On a branch the consumer listed last runs
    first (a projection shortcut listed after the main path runs before it)."""
    consumers: list[list[int]] = [[] for _ in nodes]
    for j, n in enumerate(nodes):
        for s, _ in n.inputs:
            consumers[s].append(j)
    visited, post = [False] * len(nodes), []
    for root in range(len(nodes)):
        if visited[root]:
            continue
        visited[root] = True
        stack = [(root, iter(consumers[root]))]
        while stack:  # iterative: a deep graph must not hit Python's recursion limit
            v, it = stack[-1]
            for c in it:
                if not visited[c]:
                    visited[c] = True
                    stack.append((c, iter(consumers[c])))
                    break
            else:
                post.append(v)
                stack.pop()
    order = post[::-1]
    where = {old: new for new, old in enumerate(order)}
    out = []
    for old in order:
        n = nodes[old]
        n.inputs = [(where[s], slot) for s, slot in n.inputs]
        out.append(n)
    return out


def set_execution_orders(nodes: list[Node]) -> int:
    """nntrainer's setExecutionOrder; returns the last order."""
    k = len(nodes)
    for f, n in enumerate(nodes):
        n.orders = (f, 0, 0, 0)
    for n in reversed(nodes):
        cg = k
        if n.trainable:
            k += 1
        cd = k
        if n.trainable:
            k += 1
        ag = k
        k += 1
        n.orders = (n.orders[0], cg, cd, ag)
    return k - 1


def backward_end(nodes: list[Node], memory_optimization: bool) -> int:
    """The last execution order nntrainer plans (computeBackwardEnd, then its apply-gradient order)."""
    if not memory_optimization:
        return nodes[0].orders[3]
    consumers: dict[int, list[int]] = {}
    for j, n in enumerate(nodes):
        for src, _ in n.inputs:
            consumers.setdefault(src, []).append(j)
    must: set[int] = set()
    best, end = -1, 0
    for j, n in enumerate(nodes):
        learns = n.trainable and bool(n.weights)  # getTrainable() once the layer is finalized
        if learns or j in must:
            must.update(consumers.get(j, ()))
    for j, n in enumerate(nodes):
        learns = n.trainable and bool(n.weights)
        cur = n.orders[1] if (learns or j in must) else n.orders[0]
        if cur > best:
            best, end = cur, n.orders[3]
    return end


class _TensorPool:
    """nntrainer's TensorPool: sources in request order, views that add their orders to a source,
    placeholders (never planned)."""

    def __init__(self):
        self.src: dict[str, dict] = {}
        self.root: dict[str, str] = {}

    def request(self, name, nbytes, orders, bits, category, owner, placeholder=False):
        self.src[name] = dict(name=name, nbytes=nbytes, orders=list(orders), bits=bits, category=category,
                              owner=owner, placeholder=placeholder)
        self.root[name] = name

    def view(self, name, ref, orders, bits):
        r = self.root[ref]
        self.root[name] = r
        self.src[r]["orders"] += orders
        self.src[r]["bits"] |= bits


def _orders(node: Node, bits: int, *, trainable_only: bool = False) -> list[int]:
    f, cg, cd, ag = node.orders
    keep = not trainable_only or node.trainable
    return [o for bit, o, ok in ((FORWARD, f, True), (CALC_GRAD, cg, keep), (CALC_DERIV, cd, True),
                                 (CALC_AGRAD, ag, keep)) if bits & bit and ok]


def _in_place(nodes: list[Node], memory_optimization: bool) -> list[bool]:
    """inPlaceOptimize: each layer's in-place type from its own and its inputs' (NONE when off)."""
    types: list[str] = []
    for n in nodes:
        own = ("RESTRICTING" if n.kind in RESTRICTING else
               "NON_RESTRICTING" if n.kind in NON_RESTRICTING or (_facts(n.type) or {}).get("in_place") and
               _kind(n.type) is None else "NONE")
        from_restricting = any(types[s] == "RESTRICTING" for s, _ in n.inputs)
        if not memory_optimization or own == "NONE":
            t = "NONE"
        elif n.kind == "multiout":
            t = "RESTRICTING"
        elif own == "RESTRICTING":
            t = "RESTRICTING" if from_restricting else "NON_RESTRICTING"
        else:
            t = "NONE" if from_restricting else "NON_RESTRICTING"
        types.append(t)
    return [t != "NONE" for t in types]


def _elements(graph, i) -> int:
    return graph.operands[i].num_elements


def _channels(graph, op) -> int:
    """batch_normalization's axis: the channel, or the width when there is one channel (an FC output)."""
    x = graph.operands[op.inputs[0]].shape
    if len(x) == 4:
        return x[1] if x[1] > 1 else x[3]
    return x[-1] if x else 1


def _layer_tensors(graph, n: Node) -> list[tuple]:
    """A layer's own tensors: (name, elements, lifespan bits)."""
    if n.kind == "pooling2d":
        op = graph.operations[n.op]
        # nntrainer's global_max keeps input-sized indices (the source op's facts say so)
        global_max = _all_facts(op.source_type).get("indices") == "input"
        return [("helper_idx", _elements(graph, op.inputs[0] if global_max else n.outputs[0]), ITERATION)]
    if n.kind == "batch_normalization":
        op = graph.operations[n.op]
        c, full = _channels(graph, op), _elements(graph, op.inputs[0])
        return [("moviing_mean_backup", c, ITERATION), ("moviing_variance_backup", c, ITERATION),
                ("deviation", full, ITERATION), ("invstd", c, ITERATION), ("tensor_full", full, CALC_DERIV),
                ("cvar", c, ITERATION), ("tensor_reduced", c, FORWARD_DERIV)]
    return []


def build_requests(graph, nodes: list[Node], opt_states: int, memory_optimization: bool = True):
    """Both pools' requests in nntrainer's order: (tensor pool, weight pool, placeholders)."""
    tp, wp = _TensorPool(), _TensorPool()
    in_place = _in_place(nodes, memory_optimization)
    last_forward = nodes[-1].orders[0]
    learning: list[tuple] = []
    for j, n in enumerate(nodes):
        for idx, (s, slot) in enumerate(n.inputs):
            src = nodes[s]
            var = ((FORWARD | CALC_DERIV) if n.kind == "loss" else
                   FORWARD if n.kind in ("activation", "multiout", "batch_normalization") or not n.trainable
                   else FORWARD_GRAD)
            tp.view(f"{n.name}:input{idx}:grad", f"{src.name}:out{slot}:grad", _orders(n, CALC_DERIV), CALC_DERIV)
            tp.view(f"{n.name}:input{idx}", f"{src.name}:out{slot}", _orders(n, var), var)
        if n.kind == "input":
            nb = _elements(graph, n.outputs[0]) * ELEMENT
            tp.request(f"{n.name}:input0:grad", nb, [], 0, "back-prop", n.name, placeholder=True)
            tp.request(f"{n.name}:input0", nb, [], 0, "non-const", n.name, placeholder=True)
        for slot, o in enumerate(n.outputs):
            name, nb = f"{n.name}:out{slot}", _elements(graph, o) * ELEMENT
            var = FORWARD_DERIV if n.kind == "activation" else FORWARD
            extra = [last_forward] if j == len(nodes) - 1 else []
            first_in = f"{n.name}:input0"
            if in_place[j]:
                tp.view(name, first_in, extra + _orders(n, var), var)
            else:
                tp.request(name, nb, extra + _orders(n, var), var, "non-const", n.name)
            if n.kind == "loss":
                tp.request(f"{name}:grad", nb, [], 0, "back-prop", n.name, placeholder=True)
            elif in_place[j] and n.kind != "multiout":
                tp.view(f"{name}:grad", f"{first_in}:grad", _orders(n, CALC_GRAD_DERIV), CALC_GRAD_DERIV)
            else:
                tp.request(f"{name}:grad", nb, _orders(n, CALC_GRAD_DERIV), CALC_GRAD_DERIV, "back-prop", n.name)
        for t, elements, bits in _layer_tensors(graph, n):
            tp.request(f"{n.name}:{t}", elements * ELEMENT, _orders(n, bits, trainable_only=True), bits,
                       "extra", n.name)
        f, cg, cd, ag = n.orders
        for w, wname, learns in n.weights:
            nb = _elements(graph, w) * ELEMENT
            wp.request(f"{n.name}:{wname}", nb, [f, cd] + ([cg, ag] if n.trainable else []), MAX,
                       "trainable", n.name)
            if n.trainable and learns:
                tp.request(f"{n.name}:{wname}:grad", nb, [cg, ag], BACKWARD_FUNC, "gradient", n.name)
                learning.append((f"{n.name}:{wname}", nb, ag, n.name))
    for name, nb, ag, owner in learning:
        for s in range(opt_states):
            wp.request(f"{name}:opt{s}", nb, [ag], MAX, "opt-variable", owner)
    return tp, wp


def _validity(info, end) -> tuple[int, int] | None:
    """TensorPool::finalize: [first, last] of the orders within [0, end]; MAX: all of it."""
    orders = info["orders"]
    if info["placeholder"] or not orders:
        return None
    if info["bits"] == MAX:
        return 0, end
    lo = min((o for o in orders if o >= 0), default=end)
    hi = max((o for o in orders if o <= end), default=0)
    if hi < 0 or lo > end:
        return None
    return max(lo, 0), min(hi, end)


def nntrainer_loss(graph, config) -> str:
    """The loss nntrainer trains with: the setup's when it names one (flag or metadata); otherwise, for
    a model ending in a Softmax or Sigmoid, nntrainer's classifier setup `Loss = cross` (the Softmax
    fused into cross_softmax), else mse."""
    loss = getattr(config, "loss", "mse")
    if (getattr(config, "sources", None) or {}).get("loss") in ("flag", "metadata"):
        return loss
    ops = graph.operations
    last = next((op for op in ops if graph.outputs and graph.outputs[0] in op.outputs), None)
    if last is not None and _cross_entropy(last) and fused_activation(last) == "NONE":
        return "cce"
    return loss


class NntrainerProfile:
    name = "nntrainer"
    precisions = ("32-true",)
    precision_note = "reproduced for float32 training only (its fixtures are float32 runs)"
    checked = "byte-exact against nntrainer 0.6.0 fixtures (48 configurations); not run on this model"

    def build(self, graph, config, *, planner: str | None = None, memory_optimization: bool = True,
              **_) -> BufferList:
        loss = nntrainer_loss(graph, config)
        why = refusal(graph, loss, getattr(config, "batchnorm", "train"))
        if why:
            raise UnsupportedOpError(why)
        if config.optimizer not in ("sgd", "adam"):
            raise UnsupportedOpError(f"nntrainer 0.6.0 has no {config.optimizer} optimizer (its sgd has no momentum; "
                                     f"it has sgd, adam and adamw)")
        if config.param_level:
            raise UnsupportedOpError("nntrainer trains whole layers (every weight of a trainable layer): the weight-level "
                                     "modes (--train biases | params:GLOB, --freeze params:GLOB, --lora, a file's "
                                     "peft adapters) need the memplan profile")
        nodes = build_nodes(graph, config.selected_ops(graph), loss)
        bl = self.buffers_from_nodes(graph, nodes, config.optimizer_state_count, planner, memory_optimization)
        bl.info["loss_layer"] = nodes[-1].name[:-1]
        return bl

    def buffers_from_nodes(self, graph, nodes, opt_states: int, planner: str | None = None,
                           memory_optimization: bool = True) -> BufferList:
        tp, wp = build_requests(graph, nodes, opt_states, memory_optimization)
        end = backward_end(nodes, memory_optimization)
        steps = []
        for n in nodes:
            f, cg, cd, ag = n.orders
            steps.append(Step(f, "forward", n.op, n.name))
            kinds = ((cg, "calcGradient"), (cd, "calcDerivative"), (ag, "applyGradient")) if n.trainable \
                else ((cd, "calcDerivative"),)
            steps += [Step(o, k, n.op, n.name) for o, k in kinds if o <= end]
        steps.sort(key=lambda s: s.index)
        buffers, lifespans = [], {}
        for pool, reqs in (("tensor_pool", tp), ("weight_pool", wp)):
            for info in reqs.src.values():
                v = _validity(info, end)
                if v is None or info["nbytes"] == 0:
                    continue
                lifespans[info["name"]] = lifespan_name(info["bits"])
                buffers.append(Buffer(info["name"], info["category"], info["nbytes"], v[0], v[1], owner=info["owner"],
                                      pool=pool, nbytes=info["nbytes"], key=f"{pool}:{info['name']}"))
        # the data buffers nntrainer fills (model inputs, the label): not planned, listed so totals
        # compare like for like
        ext = [info for info in tp.src.values() if info["placeholder"] and not info["name"].endswith(":input0:grad")]
        for info in ext:
            name = info["name"].rsplit(":", 1)[0] + ":label" if info["name"].endswith(":grad") else info["name"]
            buffers.append(Buffer(name, "non-const", info["nbytes"], 0, end, owner="placeholder", pool="external",
                                  nbytes=info["nbytes"], key=f"external:{name}"))
        p = planner or PLANNERS[bool(memory_optimization)]
        pools = [Pool("tensor_pool", "non-const", p), Pool("weight_pool", "trainable", p)]
        if ext:
            pools.append(Pool("external", "non-const", "naive"))
        info = {"profile": "nntrainer", "nodes": len(nodes), "last_order": end,
                "memory_optimization": bool(memory_optimization), "lifespans": lifespans}
        return BufferList(buffers, steps, pools, info, naive_means=NAIVE_NNTRAINER)

    def figures(self, analysis) -> dict:
        by_pool = {p.pool.name: p.plan.arena for p in analysis.pools}
        return {"nntrainer": {"pools": by_pool, "nodes": analysis.buffers.info.get("nodes"),
                              "last_order": analysis.buffers.info.get("last_order"),
                              "loss_layer": analysis.buffers.info.get("loss_layer"),
                              "memory_optimization": analysis.buffers.info.get("memory_optimization")}}


PROFILE = NntrainerProfile()
