"""`--profile nntrainer`: how nntrainer (nnstreamer/nntrainer) would lay out training memory.

Facts (shared/research/onert-training-memory.md section 6; nntrainer sources `network_graph.cpp`
setExecutionOrder, `manager.cpp` requestWeights/requestInputs, `layer_context.h` outSpec,
`tensor_pool.cpp` finalize, `conv2d_layer.cpp`, `pooling2d_layer.cpp`):

Nodes. The model's ops in topological order, then the loss. As nntrainer's realizers do, a fused
activation becomes its own activation node right after its op, and an output read by more than one
node gets a MultiOut node right after its producer (one output per reader).

Execution orders. forward = node index. Backward walks the nodes in reverse with a counter that
starts at the node count: CG = k; if the node is trainable, k += 1; CD = k; if trainable, k += 1;
AG = k; k += 1. A frozen node's three backward orders are one.

Lifespans (each bit adds that order of the requesting node; a view adds its orders to its source;
validity = [min order, max order]; MAX is long-term: the whole [0, last order]):
- node output: FORWARD_FUNC; its gradient (back-prop): BACKWARD_FUNC (CG, CD, AG).
- node input (a view of the producer's output): FORWARD_GRAD (kept until the reader's CG), but
  FORWARD_FUNC for activation and MultiOut readers and frozen readers, FORWARD_DERIV for the loss;
  the input's gradient (a view of the producer's output gradient): CALC_DERIV.
- in place (nntrainer's inPlaceOptimize): an activation's or Reshape's output and output gradient
  are views of its input and input gradient, except an activation reading a MultiOut output (it
  would clobber a tensor another reader needs); a MultiOut's outputs are views of its input (their
  gradients are separate, it sums them).
- weights: MAX, in the weight pool; a trainable node's weight gradient: BACKWARD_FUNC with orders
  (CG, AG), in the tensor pool; optimizer state (Adam 2, momentum 1): MAX, in the weight pool.
- temporaries: Conv2D / DepthwiseConv2D `im2col` ITERATION (F, CG, CD, AG) and `col2im`
  BACKWARD_FUNC, each one sample's patch matrix; pooling and Mean `helper_idx` ITERATION, output-sized,
  4-byte elements.
- model inputs and the label are placeholders nntrainer does not allocate (the data buffers fill
  them); they are listed in an `external` pool (all live) so totals compare like for like.
Known ops (`LAYERS`, or a registry op's `profiles["nntrainer"]`): every op must map to an nntrainer
layer this profile models, with a fused activation nntrainer has, 2-D windows and no grouped Conv2D;
anything else is refused with the op named (`refusal`), never laid out with default rules.
Sizes are exact bytes: nntrainer does not align. Both pools use the same planner, OptimizedV1 by
default (`--planner nntrainer-v2` / `nntrainer-v3` / any memplan planner to compare).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from memplan_cli.buffers import Buffer, BufferList, Pool, Step
from memplan_cli.errors import UnsupportedOpError

# lifespan bits (nntrainer tensor_wrap_specs.h)
FORWARD, CALC_DERIV, CALC_GRAD, CALC_AGRAD = 0b1, 0b10, 0b100, 0b1000
LIFESPAN_NAMES = {
    0b1: "FORWARD_FUNC", 0b10: "CALC_DERIV", 0b100: "CALC_GRAD", 0b1000: "CALC_AGRAD",
    0b110: "CALC_GRAD_DERIV", 0b1110: "BACKWARD_FUNC", 0b101: "FORWARD_GRAD",
    0b1101: "FORWARD_GRAD_AGRAD", 0b11: "FORWARD_DERIV", 0b111: "FORWARD_GRAD_DERIV",
    0b1111: "ITERATION", 0b1111111: "MAX",
}
ITERATION, BACKWARD_FUNC, MAX = 0b1111, 0b1110, 0b1111111
NAIVE_NNTRAINER = ("every tensor nntrainer requests its own bytes; its views (in-place activation and "
                   "Reshape outputs and their gradients, MultiOut outputs) share their source's bytes")

ACTIVATIONS = {"Relu", "Relu6", "Sigmoid", "Tanh", "Softmax"}
IN_PLACE = ACTIVATIONS | {"Reshape"}
POOLING = {"MaxPool2D", "AvgPool2D", "Mean"}
CONV = {"Conv2D", "DepthwiseConv2D"}
FUSED_TO_OP = {"RELU": "Relu", "RELU6": "Relu6", "TANH": "Tanh", "SIGMOID": "Sigmoid"}
# op type -> the nntrainer layer (nntrainer/layers/*) this profile models it as; every other op is
# refused (its layer's tensor requests are not modelled). An op of the registry may declare its own:
# `OpDef.profiles["nntrainer"] = {"layer": name, "in_place": bool, "weights": bool}`.
LAYERS = {
    "Conv2D": "conv2d", "DepthwiseConv2D": "depthwise_conv2d", "FullyConnected": "fully_connected",
    "MatMul": "matmul", "MaxPool2D": "pooling2d (max)", "AvgPool2D": "pooling2d (average)",
    "Mean": "pooling2d (global_average)", "Add": "addition", "Sub": "subtract", "Mul": "multiply",
    "Div": "divide", "Relu": "activation (relu)", "Sigmoid": "activation (sigmoid)",
    "Tanh": "activation (tanh)", "Softmax": "activation (softmax)", "Reshape": "reshape",
    "Concat": "concat", "Loss": "loss (mse, cross-entropy)",
    # no nntrainer layer of their own (ActiFunc has no relu6; padding is a conv / pooling property):
    # counted as an in-place activation like relu, and as a plain layer (input and output)
    "Relu6": "activation (as relu)", "Pad": "(a plain layer)",
}

DEFAULT_PLANNER = "nntrainer-v1"


def _in_place(op_type: str) -> bool:
    """A registry op that declares an in-place nntrainer layer (its output a view of its input)."""
    return op_type not in LAYERS and op_type != "MultiOut" and bool((_facts(op_type) or {}).get("in_place"))


def lifespan_name(bits: int) -> str:
    return LIFESPAN_NAMES.get(bits, f"0b{bits:b}")


@dataclass
class Node:
    name: str
    type: str
    op: int  # forward op index in the graph (-1: a node nntrainer adds)
    inputs: list  # tensor keys
    outputs: list
    trainable: bool
    weights: list = field(default_factory=list)  # const operand indices
    orders: tuple = (0, 0, 0, 0)  # (forward, calcGradient, calcDerivative, applyGradient)


def fused_activation(op) -> str:
    for key in ("fused_activation", "fused_activation_function", "activation"):
        v = op.attrs.get(key)
        if isinstance(v, str) and v.upper() not in ("", "NONE"):
            return v.upper()
    return "NONE"


# ops whose float constants are nntrainer weights; other ops' constants (Relu6's clip bounds in ONNX,
# a Pad's paddings) are layer properties in nntrainer, not tensors
WEIGHTED = CONV | {"FullyConnected", "MatMul", "BatchNorm"}


def _is_weight(graph, op, i) -> bool:
    o = graph.operands[i]
    weighted = op.type in WEIGHTED or bool((_facts(op.type) or {}).get("weights"))
    return weighted and o.is_const and o.dtype.startswith(("float", "bfloat"))


def _facts(op_type: str) -> dict | None:
    from memplan_cli import ops

    d = ops.get(op_type)
    f = (d.profiles or {}).get("nntrainer") if d is not None else None
    if f is not None:
        return f if f.get("layer") else None
    return {"layer": LAYERS[op_type]} if op_type in LAYERS else None


def refusal(graph) -> str | None:
    """The first op this profile cannot lay out as nntrainer would, and why; None when every op is
    known: an op type without a modelled nntrainer layer, a fused activation nntrainer does not have,
    a grouped Conv2D (conv2d has no groups) or a window that is not 2-D (the im2col sizes are 2-D)."""
    for op in graph.operations:
        if _facts(op.type) is None:
            return (f"nntrainer profile: op {op.label} ({op.type}) has no nntrainer layer memplan models "
                    f"(its tensor requests are unknown)")
        act = fused_activation(op)
        if act != "NONE" and act not in FUSED_TO_OP:
            return f"nntrainer profile: op {op.label} has a fused activation {act} nntrainer does not have"
        if op.type in CONV | POOLING - {"Mean"}:
            x = graph.operands[op.inputs[0]].shape
            if len(x) != 4:
                return (f"nntrainer profile: op {op.label} ({op.type}) works over {len(x) - 2} spatial "
                        f"dimension(s); the profile models 2-D windows only")
        if op.type == "Conv2D":
            w = graph.operands[op.inputs[1]].shape
            x = graph.operands[op.inputs[0]].shape
            nchw = op.attrs.get("layout") == "NCHW"
            groups = int(op.attrs.get("group", 1) or 1)
            if groups == 1 and len(w) == 4:
                c_in, w_in = (x[1], w[1]) if nchw else (x[-1], w[-1])
                groups = c_in // w_in if w_in and c_in != w_in else 1
            if groups != 1:
                return f"nntrainer profile: op {op.label} is a grouped Conv2D ({groups} groups): conv2d has no groups"
    return None


def build_nodes(graph, trainable_ops: set[int]) -> list[Node]:
    """nntrainer's node list for a forward graph whose last op may be the Loss (see module doc)."""
    ops = graph.operations
    readers: dict[int, list[int]] = {}
    for op in ops:
        for i in dict.fromkeys(op.inputs):
            if i >= 0 and not graph.operands[i].is_const:
                readers.setdefault(i, []).append(op.index)
    producer = {o: op.index for op in ops for o in op.outputs}
    # key of the tensor each reader sees for operand i: the operand itself, or MultiOut output j
    seen_as: dict[tuple[int, int], tuple] = {}
    nodes: list[Node] = []
    for k in graph.topological_order():
        op = ops[k]
        is_loss = op.type == "Loss"
        tr = True if is_loss else k in trainable_ops
        ins = []
        for i in op.inputs:
            if i < 0 or graph.operands[i].is_const:
                continue
            ins.append(seen_as.get((i, k), ("fwd", i) if i in producer else ("ext", i)))
        weights = [i for i in dict.fromkeys(op.inputs) if i >= 0 and _is_weight(graph, op, i)]
        act = fused_activation(op)
        label = op.name or f"{op.type}{k}"
        if act != "NONE" and len(op.outputs) == 1:
            o = op.outputs[0]
            nodes.append(Node(label, op.type, k, ins, [("pre", o)], tr, weights))
            nodes.append(Node(f"{label}:{act.lower()}", FUSED_TO_OP[act], -1,
                              [("pre", o)], [("fwd", o)], tr))
        else:
            nodes.append(Node(label, op.type, k, ins, [("fwd", o) for o in op.outputs], tr, weights))
        for o in op.outputs:
            rs = readers.get(o, [])
            if len(rs) > 1:
                outs = []
                for j, r in enumerate(rs):
                    seen_as[(o, r)] = ("mo", o, j)
                    outs.append(("mo", o, j))
                nodes.append(Node(f"{label}:multiout{o}", "MultiOut", -1, [("fwd", o)], outs, tr))
    set_execution_orders(nodes)
    return nodes


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


def _orders(node: Node, bits: int) -> list[int]:
    f, cg, cd, ag = node.orders
    return [o for bit, o in ((FORWARD, f), (CALC_GRAD, cg), (CALC_DERIV, cd), (CALC_AGRAD, ag)) if bits & bit]


class _Pool:
    """Requests with views: a view adds its orders and lifespan bits to its source."""

    def __init__(self):
        self.parent: dict = {}
        self.info: dict = {}  # source key -> dict(name, nbytes, category, owner, orders, bits)

    def root(self, key):
        while key in self.parent:
            key = self.parent[key]
        return key

    def has(self, key) -> bool:
        return self.root(key) in self.info

    def request(self, key, name, nbytes, category, owner, orders, bits):
        self.info[key] = dict(name=name, nbytes=nbytes, category=category, owner=owner,
                              orders=list(orders), bits=bits)

    def view(self, key, source, orders, bits):
        """`key` becomes a view of `source` (key == source: just extend the source)."""
        r = self.root(source)
        if key != r:
            self.parent[key] = r
        self.info[r]["orders"] += list(orders)
        self.info[r]["bits"] |= bits


def _patch_bytes(graph, node: Node, out_operand: int) -> int:
    """One sample's im2col matrix (input channels x kernel area x output positions), float32 bytes."""
    import math

    w = graph.operands[node.weights[0]] if node.weights else None
    out = graph.operands[out_operand]
    if w is None or len(out.shape) != 4:
        return 0
    per_sample = out.num_elements // max(out.shape[0], 1)  # output channels x positions
    cout = w.shape[0] if w.shape else 1
    if node.type == "DepthwiseConv2D":
        op = graph.operations[node.op]
        channels = out.shape[1] if op.attrs.get("layout") == "NCHW" else out.shape[-1]
        kernel = op.attrs.get("kernel")
        area = math.prod(kernel) if kernel else w.num_elements // max(channels, 1)
        return area * per_sample * 4
    return (w.num_elements // max(cout, 1)) * (per_sample // max(cout, 1)) * 4


def build_requests(graph, nodes: list[Node], opt_states: int):
    """The tensor pool, weight pool and external placeholders, with orders and lifespan bits."""
    tp, wp = _Pool(), _Pool()
    ext: dict = {}  # operand index -> placeholder request
    ext_alias: dict = {}  # tensor key -> operand index of the placeholder it is a view of
    end = max(n.orders[3] for n in nodes)

    def operand(key):
        return graph.operands[key[1]]

    def placeholder(key, orders):
        i = ext_alias.get(key, key[1])
        o = graph.operands[i]
        e = ext.setdefault(i, dict(name=o.name, nbytes=o.nbytes, orders=[]))
        e["orders"] += orders

    for n in nodes:
        if n.type == "Loss":
            var_bits = FORWARD | CALC_DERIV
        elif n.type in ACTIVATIONS or n.type == "MultiOut" or not n.trainable:
            var_bits = FORWARD
        else:
            var_bits = FORWARD | CALC_GRAD
        for key in n.inputs:
            if key[0] == "ext" or key in ext_alias:
                placeholder(key, _orders(n, var_bits))
                continue
            tp.view(("v", key), ("v", key), _orders(n, var_bits), var_bits)
            tp.view(("g", key), ("g", key), _orders(n, CALC_DERIV), CALC_DERIV)
        for key in n.outputs:
            o = operand(key)
            sfx = ":pre-act" if key[0] == "pre" else (f":{key[2]}" if key[0] == "mo" else "")
            src = n.inputs[0] if n.inputs else None
            # an activation does not overwrite a tensor another reader still needs (a MultiOut output)
            in_place = n.type == "MultiOut" or ((n.type in IN_PLACE or _in_place(n.type)) and not (
                n.type in ACTIVATIONS and src is not None and src[0] == "mo"))
            if in_place:
                if src is None or src[0] == "ext" or src in ext_alias:
                    if src is not None:  # a view of a placeholder is a placeholder
                        ext_alias[key] = ext_alias.get(src, src[1])
                        placeholder(key, _orders(n, FORWARD))
                    continue
                tp.view(("v", key), ("v", src), _orders(n, FORWARD), FORWARD)
                if n.type != "MultiOut":
                    tp.view(("g", key), ("g", src), _orders(n, BACKWARD_FUNC), BACKWARD_FUNC)
                    continue
            else:
                tp.request(("v", key), f"{n.name}:out:{o.name}{sfx}", o.nbytes, "non-const", n.name,
                           _orders(n, FORWARD), FORWARD)
            tp.request(("g", key), f"{n.name}:out:{o.name}{sfx}:grad", o.nbytes, "back-prop", n.name,
                       _orders(n, BACKWARD_FUNC), BACKWARD_FUNC)
        # temporaries
        if n.type in CONV and n.outputs:
            b = _patch_bytes(graph, n, operand(n.outputs[0]).index)
            if b:
                tp.request(("im2col", n.name), f"{n.name}:im2col", b, "extra", n.name,
                           _orders(n, ITERATION), ITERATION)
                tp.request(("col2im", n.name), f"{n.name}:col2im", b, "extra", n.name,
                           _orders(n, BACKWARD_FUNC), BACKWARD_FUNC)
        if n.type in POOLING and n.outputs:
            o = operand(n.outputs[0])
            tp.request(("helper", n.name), f"{n.name}:helper_idx", o.num_elements * 4, "extra", n.name,
                       _orders(n, ITERATION), ITERATION)
        # weights, their gradients and optimizer state
        for w in n.weights:
            wo = graph.operands[w]
            if ("w", w) not in wp.info:
                wp.request(("w", w), wo.name, wo.nbytes, "trainable", n.name, [0, end], MAX)
            if n.trainable:
                tp.request(("wg", w, n.name), f"{wo.name}:grad", wo.nbytes, "gradient", n.name,
                           _orders(n, CALC_GRAD | CALC_AGRAD), BACKWARD_FUNC)
                for s in range(opt_states):
                    if ("opt", w, s) not in wp.info:
                        wp.request(("opt", w, s), f"{wo.name}:opt{s}", wo.nbytes, "opt-variable",
                                   n.name, [0, end], MAX)
    return tp, wp, ext, end


def with_loss(graph, loss_outputs=()):
    """The graph with nntrainer's loss node appended after its float output (unless it has one).
    nntrainer's NetworkGraph::addLossLayer gives every output node its own loss layer, whatever
    --loss-outputs says; this profile models one: a model with several float outputs is refused."""
    import copy

    from memplan_cli.ir.graph import Operand, Operation
    from memplan_cli.ir.outputs import loss_outputs as resolve

    if any(op.type == "Loss" for op in graph.operations) or not graph.outputs:
        return graph
    heads = resolve(graph, ())
    if len(heads) > 1:
        raise UnsupportedOpError(f"nntrainer gives each of the model's {len(heads)} float outputs its own loss layer "
                                 "(NetworkGraph::addLossLayer); the nntrainer profile models one loss: use --profile memplan")
    heads = resolve(graph, loss_outputs)  # checks --loss-outputs names that one output
    g = copy.copy(graph)
    y = graph.operands[heads[0]]
    n = len(graph.operands)
    label = Operand(n, "label", y.shape, y.dtype, is_input=True)
    loss = Operand(n + 1, "loss", (1,), "float32", is_output=True)
    g.operands = list(graph.operands) + [label, loss]
    g.operations = list(graph.operations) + [Operation(len(graph.operations), "Loss", [y.index, n], [n + 1],
                                                       name="loss")]
    g.inputs = list(graph.inputs) + [n]
    g.outputs = [n + 1]
    return g


def _validity(info, end) -> tuple[int, int]:
    if info["bits"] == MAX:  # long-term
        return 0, end
    return min(info["orders"]), max(info["orders"])


class NntrainerProfile:
    name = "nntrainer"

    def build(self, graph, config, *, planner: str | None = None, **_) -> BufferList:
        why = refusal(graph)
        if why:
            raise UnsupportedOpError(why)
        g = with_loss(graph, config.loss_outputs)
        if config.param_level:
            raise UnsupportedOpError("nntrainer trains whole layers (every weight of a trainable layer): the weight-level "
                                     "modes (--train biases, --freeze params:GLOB, --lora) need the memplan profile")
        nodes = build_nodes(g, config.selected_ops(graph))
        return self.buffers_from_nodes(g, nodes, config.optimizer_state_count, planner)

    def buffers_from_nodes(self, graph, nodes, opt_states: int, planner: str | None = None) -> BufferList:
        tp, wp, ext, end = build_requests(graph, nodes, opt_states)
        steps = [Step(n.orders[0], "forward", n.op, n.name) for n in nodes]
        bwd = []
        for n in nodes:
            _, cg, cd, ag = n.orders
            if n.trainable:
                bwd += [Step(cg, "calcGradient", n.op, n.name), Step(cd, "calcDerivative", n.op, n.name),
                        Step(ag, "applyGradient", n.op, n.name)]
            else:
                bwd.append(Step(cd, "calcDerivative", n.op, n.name))
        steps += sorted(bwd, key=lambda s: s.index)
        buffers = []
        for pool, reqs in (("tensor_pool", tp), ("weight_pool", wp)):
            for key, info in reqs.info.items():
                if info["nbytes"] == 0:
                    continue
                a, b = _validity(info, end)
                buffers.append(Buffer(info["name"], info["category"], info["nbytes"], a, b,
                                      owner=info["owner"], pool=pool, nbytes=info["nbytes"]))
        for i, e in sorted(ext.items()):
            buffers.append(Buffer(e["name"], "non-const", e["nbytes"], min(e["orders"]), max(e["orders"]), owner="placeholder",
                                  pool="external", nbytes=e["nbytes"]))
        p = planner or DEFAULT_PLANNER
        pools = [Pool("tensor_pool", "non-const", p), Pool("weight_pool", "trainable", p)]
        if ext:
            pools.append(Pool("external", "non-const", "naive"))
        info = {"profile": "nntrainer", "nodes": len(nodes), "last_order": end,
                "lifespans": {info["name"]: lifespan_name(info["bits"])
                              for r in (tp, wp) for info in r.info.values()}}
        return BufferList(buffers, steps, pools, info, naive_means=NAIVE_NNTRAINER)

    def figures(self, analysis) -> dict:
        by_pool = {p.pool.name: p.plan.arena for p in analysis.pools}
        return {"nntrainer": {"pools": by_pool, "nodes": analysis.buffers.info.get("nodes"),
                              "last_order": analysis.buffers.info.get("last_order")}}


PROFILE = NntrainerProfile()
