"""Dev-only: export torchvision resnet18 / shufflenet_v2_x0_5 and a tiny GPT-2 with the PyTorch -> TF Lite
converters (litert-torch, onnx2tf), then check each file the way docs/formats.md reports it.

    python devtools/tflite_converters.py export OUT [--batch N] [--size HW] [--only NAMES] [--converters ...]
    python devtools/tflite_converters.py check OUT/*.tflite
    python devtools/tflite_converters.py export OUT --only fresh         # round 51: FRESH
    python devtools/tflite_converters.py keras OUT                       # round 51's Keras models
    python devtools/tflite_converters.py jax OUT                         # round 51's Flax models (jax2onnx)
    python devtools/tflite_converters.py sweep OUT/*.tflite              # every command, every profile

Needs a venv with torch, torchvision, transformers, litert-torch, onnx2tf and tensorflow-cpu
(requirements-dev.txt names the ones the corpus was made with); memplan never imports it.
Weights are random (torch's init, seeded); the norms get random scale, shift and statistics, as a
trained network has them, so the converter's folded biases are distinct constants (at their init
they are equal zeros, which the converter writes once and shares).

`check` prints, per file: whether `memplan analyze F -b B -O adam -l cce` and `memplan verify F -b 2
-O adam -l cce` pass, the elements memplan trains (its gradient bytes / 4), the file's float
constants of more than one element, and the normalisations noted as merged into the next layer.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

NAMES = ("resnet18", "shufflenet_v2_x0_5", "gpt2_tiny")
# round 51's fresh networks (in none of the zoos before): timm CNNs of varied kinds, small torch modules
# (GRU / LSTM text classifiers; a decoder with GroupNorm, InstanceNorm, ConvTranspose2d and nearest
# upsampling), tiny causal LMs and an ALBERT encoder from transformers' configs
FRESH_TIMM = ("tf_mobilenetv3_small_minimal_100", "ese_vovnet19b_slim_dw", "starnet_s050", "dla46_c",
              "semnasnet_050", "cs3darknet_focus_s", "inception_next_atto", "efficientformerv2_s0")
FRESH_SEQ = ("gru_text", "lstm_text", "qwen2_tiny", "phi3_tiny", "olmo_tiny", "albert_tiny")
FRESH = FRESH_TIMM + ("unet_tiny",) + FRESH_SEQ


def _lm():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    class LM(torch.nn.Module):
        """GPT-2 (n_embd 32, 2 layers, 2 heads, vocab 100, 16 positions; lm_head tied), logits only."""

        def __init__(self):
            super().__init__()
            cfg = GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=16, use_cache=False,
                             attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)
            cfg._attn_implementation = "eager"
            self.m = GPT2LMHeadModel(cfg)

        def forward(self, ids):
            return self.m(input_ids=ids, use_cache=False).logits

    return LM()


def _fresh_seq(name: str):
    import torch
    import transformers as tr

    class Text(torch.nn.Module):  # nn.Embedding -> nn.GRU / nn.LSTM -> the last step's Linear
        def __init__(self, rnn):
            super().__init__()
            self.emb, self.rnn, self.fc = torch.nn.Embedding(60, 16), rnn(16, 24, batch_first=True), torch.nn.Linear(24, 5)

        def forward(self, ids):
            return self.fc(self.rnn(self.emb(ids))[0][:, -1])

    class Logits(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids):
            return self.m(input_ids=ids).logits

    if name in ("gru_text", "lstm_text"):
        return Text(torch.nn.GRU if name == "gru_text" else torch.nn.LSTM)
    dec = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=100,
               max_position_embeddings=32, use_cache=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    if name == "albert_tiny":
        cfg = tr.AlbertConfig(embedding_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=2, vocab_size=100, max_position_embeddings=32, hidden_dropout_prob=0.0,
                              attention_probs_dropout_prob=0.0, num_labels=3)
        cls = tr.AlbertForSequenceClassification
    elif name == "qwen2_tiny":
        cfg, cls = tr.Qwen2Config(**dec, num_key_value_heads=2), tr.Qwen2ForCausalLM
    elif name == "phi3_tiny":
        cfg, cls = tr.Phi3Config(**dec, num_key_value_heads=2), tr.Phi3ForCausalLM
    else:
        cfg, cls = tr.OlmoConfig(**dec), tr.OlmoForCausalLM  # LayerNorm without scale or shift
    cfg._attn_implementation = "eager"
    return Logits(cls(cfg))


def _unet_tiny():
    import torch
    n = torch.nn

    class UNetTiny(n.Module):
        def __init__(self):
            super().__init__()
            self.d1 = n.Sequential(n.Conv2d(3, 16, 3, padding=1), n.GroupNorm(4, 16), n.SiLU())
            self.d2 = n.Sequential(n.Conv2d(16, 32, 3, stride=2, padding=1), n.GroupNorm(8, 32), n.SiLU())
            self.pool = n.AvgPool2d(2)
            self.mid = n.Sequential(n.Conv2d(32, 32, 3, padding=1), n.InstanceNorm2d(32, affine=True), n.GELU())
            self.up1, self.up2 = n.ConvTranspose2d(32, 32, 2, stride=2), n.Upsample(scale_factor=2, mode="nearest")
            self.c2, self.out = n.Conv2d(32 + 16, 8, 3, padding=1), n.Conv2d(8, 4, 1)

        def forward(self, x):
            a = self.d1(x)
            b = self.d2(a)
            c = self.up2(self.up1(self.mid(self.pool(b))) + b)
            return self.out(torch.relu(self.c2(torch.cat([c, a], 1))))

    return UNetTiny()


def model(name: str, batch: int, size: int):
    import torch
    import torchvision

    torch.manual_seed(0)
    if name == "gpt2_tiny":
        return _lm(), torch.randint(0, 100, (batch, 8))
    if name in FRESH_SEQ:
        return _fresh_seq(name), torch.randint(0, 60, (batch, 8))
    if name == "unet_tiny":
        return _unet_tiny(), torch.randn(batch, 3, 32, 32)
    if name in FRESH_TIMM:
        import timm

        return timm.create_model(name, pretrained=False, num_classes=10), torch.randn(batch, 3, size, size)
    return getattr(torchvision.models, name)(num_classes=10), torch.randn(batch, 3, size, size)


def randomize_norms(m, all_equal: bool = False) -> None:
    """The norms' scale, shift and statistics at random; with `all_equal` also every parameter whose
    elements are all equal (a zero bias, a unit scale), which a converter drops or shares: then the
    file's parameters are the module's after the converter's folding, nothing else."""
    import torch

    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for prm in m.parameters() if all_equal else ():
            if prm.numel() > 1 and bool((prm == prm.flatten()[0]).all()):
                prm.copy_(torch.rand(prm.shape, generator=g) * 0.2 - 0.1)
        for mod in m.modules():
            if isinstance(mod, (torch.nn.BatchNorm2d, torch.nn.LayerNorm)):
                mod.weight.copy_(torch.rand(mod.weight.shape, generator=g) + 0.5)
                mod.bias.copy_(torch.rand(mod.bias.shape, generator=g) - 0.5)
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.copy_(torch.rand(mod.running_mean.shape, generator=g) - 0.5)
                mod.running_var.copy_(torch.rand(mod.running_var.shape, generator=g) + 0.5)


def parameter_counts(m) -> dict:
    """The module's parameters (tied ones once), and what its BatchNorms and LayerNorms hold."""
    import torch

    unique = {id(p): p for p in m.parameters()}
    bn = [mod for mod in m.modules() if isinstance(mod, torch.nn.BatchNorm2d)]
    ln = [mod for mod in m.modules() if isinstance(mod, torch.nn.LayerNorm)]
    return {"params": sum(p.numel() for p in unique.values()),
            "batchnorm_params": sum(2 * b.num_features for b in bn), "batchnorm_channels": sum(b.num_features for b in bn),
            "layernorm_params": sum(2 * n.weight.numel() for n in ln), "layernorms": len(ln)}


def _onnx2tf_sample_images(folder: str) -> None:
    """onnx2tf checks an image model's outputs on 20 sample images it downloads unless its working folder
    holds them (calibration_image_sample_data_20x128x128x3_float32.npy): random ones, written here,
    since this machine has no network; they decide nothing in the converted file."""
    import numpy as np

    p = os.path.join(folder, "calibration_image_sample_data_20x128x128x3_float32.npy")
    if not os.path.exists(p):
        np.save(p, np.random.default_rng(0).random((20, 128, 128, 3), dtype=np.float32))


def export(out: str, batch: int, size: int, only, converters, onnx_exporter: str = "dynamo") -> None:
    os.makedirs(out, exist_ok=True)
    info = {}
    for name in only:
        m, x = model(name, batch, size)
        m.eval()
        randomize_norms(m, all_equal=name in FRESH)
        counts = parameter_counts(m)
        if "litert-torch" in converters:
            import litert_torch

            p = os.path.join(out, f"{name}_b{batch}_litert.tflite")
            try:
                litert_torch.convert(m, (x,)).export(p)
                info[os.path.basename(p)] = {"source": name, "converter": "litert-torch", **counts}
            except Exception as e:  # noqa: BLE001 - the report says what failed
                info[os.path.basename(p)] = {"source": name, "converter": "litert-torch", "error": f"{type(e).__name__}: {e}"}
        if "onnx2tf" in converters:
            import torch

            o = os.path.join(out, f"{name}_b{batch}.onnx")
            d = os.path.join(out, f"{name}_b{batch}_onnx2tf")
            # dynamo by default: TorchScript has no ONNX form of transformers 5's aten::diff (GPT-2's mask), and
            # onnx2tf fails on its shufflenet (the channel shuffle's computed shapes leave a dim unknown)
            dynamo = onnx_exporter == "dynamo"
            torch.onnx.export(m, (x,), o, dynamo=dynamo, opset_version=18 if dynamo else 17, input_names=["x"],
                              output_names=["y"], **({"external_data": False} if dynamo else {}))
            _onnx2tf_sample_images(out)
            r = subprocess.run([os.path.join(os.path.dirname(sys.executable), "onnx2tf"), "-i", os.path.abspath(o),
                                "-o", os.path.abspath(d), "-n"], capture_output=True, text=True, cwd=out)
            p = os.path.join(out, f"{name}_b{batch}_onnx2tf.tflite")
            made = sorted(f for f in os.listdir(d) if f.endswith("_float32.tflite")) if os.path.isdir(d) else []
            if r.returncode == 0 and made:
                os.replace(os.path.join(d, made[0]), p)
                info[os.path.basename(p)] = {"source": name, "converter": f"onnx2tf ({'dynamo' if dynamo else 'TorchScript'} ONNX)", **counts}
            else:
                info[os.path.basename(p)] = {"source": name, "converter": "onnx2tf", "error": (r.stdout + r.stderr)[-2000:]}
        print(json.dumps({k: v for k, v in info.items() if v["source"] == name}), flush=True)
    path = os.path.join(out, f"exports_b{batch}.json")
    old = json.load(open(path)) if os.path.exists(path) else {}
    with open(path, "w") as f:
        json.dump({**old, **info}, f, indent=1, sort_keys=True)


def check(files, batch: int) -> None:
    from click.testing import CliRunner

    from memplan_cli.cli import main
    from memplan_cli.config import TrainConfig
    from memplan_cli.loaders import load_model
    from memplan_cli.passes.pipeline import build_training_graph

    print("| file | analyze -b %d | verify -b 2 | trained elements | float constants (> 1 element) | merged norms |"
          % batch)
    print("|---|---|---|---|---|---|")
    for f in files:
        runs = []
        for cmd in (["analyze", f, "-b", str(batch)], ["verify", f, "-b", "2"]):
            r = CliRunner().invoke(main, cmd + ["-O", "adam", "-l", "cce", "-q"])
            runs.append("ok" if r.exit_code == 0 else f"exit {r.exit_code}: {(r.stderr or r.output).strip()[:160]}")
        trained = floats = merged = "-"
        try:
            g = load_model(f, batch_size=batch)
            tg = build_training_graph(g, TrainConfig(optimizer="adam", loss="cce", batch_size=batch))
            trained = f"{sum(g.operands[o].num_elements for o in tg.grad):,d}"
            floats = f"{sum(o.num_elements for o in g.operands if o.is_const and o.dtype == 'float32' and o.num_elements > 1):,d}"
            merged = str(len(g.metadata.get("merged_parameters", ())))
        except Exception as e:  # noqa: BLE001
            trained = f"{type(e).__name__}"
        print(f"| {os.path.basename(f)} | {runs[0]} | {runs[1]} | {trained} | {floats} | {merged} |", flush=True)


def keras_models():
    """Round 51's Keras models (float32 through TFLiteConverter.from_keras_model): name -> builder."""
    import tensorflow as tf

    L = tf.keras.layers

    def text(rnn):
        def build():
            i = tf.keras.Input((12,), batch_size=1, dtype="int32")
            h = L.Embedding(50, 16)(i)
            h = L.LSTM(24, return_sequences=True)(h) if rnn == "lstm" else h
            h = L.LSTM(16)(h) if rnn == "lstm" else L.GRU(24)(h)
            return tf.keras.Model(i, L.Dense(4, activation="softmax")(h))
        return build

    def bilstm():
        i = tf.keras.Input((10, 8), batch_size=1)
        h = L.GlobalMaxPooling1D()(L.Bidirectional(L.LSTM(12, return_sequences=True))(i))
        return tf.keras.Model(i, L.Dense(3)(h))

    def simple_rnn():
        i = tf.keras.Input((10, 8), batch_size=1)
        return tf.keras.Model(i, L.Dense(3)(L.SimpleRNN(12, unroll=True)(i)))

    def groupnorm_cnn():
        i = tf.keras.Input((32, 32, 3))
        h = L.Activation("swish")(L.GroupNormalization(4)(L.Conv2D(16, 3, padding="same")(i)))
        h = L.LayerNormalization()(L.Conv2D(16, 3, padding="same", groups=4)(h))
        h = L.DepthwiseConv2D(3, depth_multiplier=2, padding="same")(L.AveragePooling2D(3, 2, padding="same")(h))
        return tf.keras.Model(i, L.Dense(5)(L.GlobalAveragePooling2D()(L.MaxPooling2D(2)(h))))

    def decoder_1d():
        i = tf.keras.Input((16, 4))
        h = L.Conv1DTranspose(8, 3, strides=2, padding="same")(L.Conv1D(8, 3, strides=2, padding="same", activation="gelu")(i))
        h = L.ZeroPadding1D(1)(L.Cropping1D((2, 2))(L.UpSampling1D(2)(h)))
        return tf.keras.Model(i, L.Conv1D(4, 3)(h))

    def causal_mha():
        i = tf.keras.Input((8,), dtype="int32")
        h = L.Embedding(40, 16)(i)
        h = L.LayerNormalization()(h + L.MultiHeadAttention(2, 8)(h, h, use_causal_mask=True))
        h = L.LayerNormalization()(h + L.Dense(16)(L.Dense(32, activation="relu")(h)))
        return tf.keras.Model(i, L.Dense(40)(h))

    def attention_pool():
        q, v = tf.keras.Input((6, 8)), tf.keras.Input((10, 8))
        a = L.Attention()([L.Dense(8)(q), L.Dense(8)(v)])
        return tf.keras.Model([q, v], L.Dense(2)(L.Flatten()(L.Concatenate()([q, a]))))

    def convnext_block():
        i = tf.keras.Input((24, 24, 3))
        r = L.Conv2D(16, 4, strides=4)(i)
        h = L.LayerNormalization(epsilon=1e-6)(L.DepthwiseConv2D(7, padding="same")(r))
        h = r + L.Dense(16)(L.Dense(64, activation="gelu")(h))
        return tf.keras.Model(i, L.Dense(10)(L.GlobalAveragePooling2D()(h)))

    def onert_cnn():  # ops onert 0.1.0 trains, batch fixed at 1: tests/fixtures/tflite_converter
        i = tf.keras.Input((16, 16, 3), batch_size=1)
        h = L.MaxPooling2D(2)(L.Conv2D(8, 3, padding="same", activation="relu")(i))
        h = L.Conv2D(16, 1, activation="relu")(L.DepthwiseConv2D(3, padding="same", activation="relu6")(h))
        h = L.GlobalAveragePooling2D()(L.AveragePooling2D(2)(h))
        return tf.keras.Model(i, L.Dense(4, activation="softmax")(h))

    return {"keras_onert_cnn": onert_cnn, "keras_lstm_text": text("lstm"), "keras_gru_text": text("gru"), "keras_bilstm": bilstm,
            "keras_simple_rnn": simple_rnn, "keras_groupnorm_cnn": groupnorm_cnn, "keras_decoder_1d": decoder_1d,
            "keras_causal_mha": causal_mha, "keras_attention_pool": attention_pool,
            "keras_convnext_block": convnext_block}


def keras_export(out: str) -> None:
    """The Keras models, every weight at random first (no all-zero bias or unit scale for the converter
    to drop or share), three tf_keras recurrent models, and a tf.Module with train / infer signatures (TF Lite's on-device training
    recipe: TFLiteConverter.from_saved_model with resource variables, which memplan refuses by name)."""
    import numpy as np
    import tensorflow as tf

    os.makedirs(out, exist_ok=True)
    tf.keras.utils.set_random_seed(0)
    for name, build in keras_models().items():
        m = build()
        rng = np.random.default_rng(0)
        for w in m.weights:
            base = 1.0 if "gamma" in w.name or "variance" in w.name else 0.0
            w.assign((rng.random(tuple(w.shape)) * 0.2 - 0.1 + base).astype("float32"))
        with open(os.path.join(out, name + ".tflite"), "wb") as f:
            f.write(tf.lite.TFLiteConverter.from_keras_model(m).convert())
        print(name, "params", int(sum(np.prod(w.shape) for w in m.trainable_weights)), flush=True)
    import tf_keras  # Keras 2 (tf-keras): its LSTM converts to UNIDIRECTIONAL_SEQUENCE_LSTM, its GRU to WHILE

    for name, rnn in (("tfkeras_lstm", lambda: tf_keras.layers.LSTM(12)), ("tfkeras_gru", lambda: tf_keras.layers.GRU(12)),
                      ("tfkeras_bilstm", lambda: tf_keras.layers.Bidirectional(tf_keras.layers.LSTM(8)))):
        i = tf_keras.Input((10, 8), batch_size=1)
        m = tf_keras.Model(i, tf_keras.layers.Dense(3)(rnn()(i)))
        with open(os.path.join(out, name + ".tflite"), "wb") as f:
            f.write(tf.lite.TFLiteConverter.from_keras_model(m).convert())
        print(name, "params", m.count_params(), flush=True)
    L = tf.keras.layers

    class Trainer(tf.Module):
        def __init__(self):
            self.model = tf.keras.Sequential([tf.keras.Input((8,)), L.Dense(16, activation="relu"), L.Dense(3)])
            self.model.compile(optimizer="sgd", loss=tf.keras.losses.CategoricalCrossentropy(from_logits=True))

        @tf.function(input_signature=[tf.TensorSpec([4, 8], tf.float32), tf.TensorSpec([4, 3], tf.float32)])
        def train(self, x, y):
            with tf.GradientTape() as tape:
                loss = self.model.loss(y, self.model(x))
            grads = tape.gradient(loss, self.model.trainable_variables)
            self.model.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
            return {"loss": loss}

        @tf.function(input_signature=[tf.TensorSpec([4, 8], tf.float32)])
        def infer(self, x):
            return {"logits": self.model(x)}

    t = Trainer()
    d = os.path.join(out, "trainer_saved")
    tf.saved_model.save(t, d, signatures={"train": t.train.get_concrete_function(), "infer": t.infer.get_concrete_function()})
    c = tf.lite.TFLiteConverter.from_saved_model(d)
    c.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS, tf.lite.OpsSet.SELECT_TF_OPS]
    c.experimental_enable_resource_variables = True
    with open(os.path.join(out, "keras_trainer.tflite"), "wb") as f:
        f.write(c.convert())


def jax_export(out: str) -> None:
    """Round 51's Flax NNX models through jax2onnx (`to_onnx`, batch symbolic "B"): a CNN with
    BatchNorm (running average) and LayerNorm, an MLP, an embedding + multi-head attention."""
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from jax2onnx import to_onnx

    class CNN(nnx.Module):
        def __init__(self, rngs):
            self.c1, self.bn = nnx.Conv(3, 8, (3, 3), rngs=rngs), nnx.BatchNorm(8, rngs=rngs, use_running_average=True)
            self.c2, self.ln = nnx.Conv(8, 16, (3, 3), strides=2, rngs=rngs), nnx.LayerNorm(16, rngs=rngs)
            self.fc = nnx.Linear(16, 5, rngs=rngs)

        def __call__(self, x):
            x = nnx.avg_pool(nnx.relu(self.bn(self.c1(x))), window_shape=(2, 2), strides=(2, 2))
            return self.fc(nnx.gelu(self.ln(self.c2(x))).mean(axis=(1, 2)))

    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.l1, self.l2 = nnx.Linear(20, 32, rngs=rngs), nnx.Linear(32, 4, rngs=rngs)

        def __call__(self, x):
            return nnx.log_softmax(self.l2(nnx.tanh(self.l1(x))))

    class Attn(nnx.Module):
        def __init__(self, rngs):
            self.emb = nnx.Embed(50, 16, rngs=rngs)
            self.att = nnx.MultiHeadAttention(num_heads=2, in_features=16, decode=False, rngs=rngs)
            self.ln, self.fc = nnx.LayerNorm(16, rngs=rngs), nnx.Linear(16, 3, rngs=rngs)

        def __call__(self, ids):
            h = self.emb(ids)
            return self.fc(self.ln(h + self.att(h)).mean(axis=1))

    os.makedirs(out, exist_ok=True)
    for name, m, shape in (("jax_cnn", CNN(nnx.Rngs(0)), ("B", 16, 16, 3)), ("jax_mlp", MLP(nnx.Rngs(0)), ("B", 20)),
                           ("jax_attn", Attn(nnx.Rngs(0)), jax.ShapeDtypeStruct(("B", 8), jnp.int32))):
        to_onnx(m, [shape], return_mode="file", output_path=os.path.join(out, name + ".onnx"))
        print(name, "params", sum(x.size for x in jax.tree_util.tree_leaves(nnx.state(m, nnx.Param))), flush=True)


def sweep(files, batch: int) -> None:
    """Every command a user runs on each file, each profile, at 80 columns: ok, refused (exit 2, one
    line), FAIL (verify's exit 1), "nothing fits" (fit's exit 3 under its 1 MiB budget) or CRASH (a
    traceback or another exit status); the refusal lines follow the table."""
    from click.testing import CliRunner

    from memplan_cli.cli import main

    base = ["-b", str(batch), "-O", "adam"]
    cmds = [("analyze -p " + p, ["analyze", "{f}", *base, "-p", p]) for p in ("memplan", "onert", "nntrainer", "torch", "singa")]
    cmds += [("-f json", ["analyze", "{f}", *base, "-f", "json"]), ("fit", ["fit", "{f}", *base, "--budget", "1MiB"]),
             ("verify", ["verify", "{f}", *base]), ("verify -p onert", ["verify", "{f}", *base, "-p", "onert"]),
             ("compare", ["compare", "{f}", *base])]
    print("| file | " + " | ".join(c for c, _ in cmds) + " |")
    print("|---" * (len(cmds) + 1) + "|")
    notes = []
    for f in files:
        cells = []
        for label, argv in cmds:
            r = CliRunner().invoke(main, [a.replace("{f}", f) for a in argv], env={"COLUMNS": "80"})
            err = (r.stderr or "").strip().splitlines()
            crashed = r.exception is not None and not isinstance(r.exception, SystemExit)
            if r.exit_code == 0 and not crashed:
                cells.append("ok")
                continue
            if label == "fit" and r.exit_code == 3 and not crashed:  # docs/fit.md: nothing fits the budget
                cells.append("nothing fits")
                continue
            if crashed or r.exit_code not in (1, 2) or (r.exit_code == 2 and len(err) != 1):
                cells.append("CRASH")
                notes.append(f"{os.path.basename(f)} {label}: exit {r.exit_code} {type(r.exception).__name__}")
            else:
                cells.append("refused" if r.exit_code == 2 else "FAIL")
                notes.append(f"{os.path.basename(f)} {label}: {err[-1] if err else r.output.strip()[-200:]}")
        print(f"| {os.path.basename(f)} | " + " | ".join(cells) + " |", flush=True)
    print()
    for n in notes:
        print("-", n)


def _tiny(name: str):
    """The tiny exports kept in tests/corpus (random init, seeded): (module, sample input)."""
    import torch

    torch.manual_seed(0)
    if name == "maxpool":  # torch's padded max-pool: the converters' PADV2 (lowest float / -inf) + VALID pool
        m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.MaxPool2d(3, 2, padding=1), torch.nn.Conv2d(8, 8, 3, padding=1),
                                torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4))
        return m, torch.randn(2, 3, 16, 16)

    class EmbedLN(torch.nn.Module):  # nn.Embedding (EMBEDDING_LOOKUP), a LayerNorm merged into the Linear after it
        def __init__(self):
            super().__init__()
            self.emb, self.ln, self.fc = torch.nn.Embedding(50, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)

        def forward(self, ids):
            return self.fc(self.ln(self.emb(ids)))

    return EmbedLN(), torch.randint(0, 50, (2, 8))


def corpus(out: str) -> None:
    """tests/corpus's converter exports (batch 2, the corpus tests' batch: no re-batch)."""
    import litert_torch

    for name, fname in (("maxpool", "litert_maxpool_tiny.tflite"), ("embed_ln", "litert_embed_ln_tiny.tflite")):
        m, x = _tiny(name)
        m.eval()
        randomize_norms(m)
        litert_torch.convert(m, (x,)).export(os.path.join(out, fname))
        print(fname, parameter_counts(m), flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export")
    e.add_argument("out")
    e.add_argument("--batch", type=int, default=1)
    e.add_argument("--size", type=int, default=96, help="image side for the CNNs")
    e.add_argument("--only", default=",".join(NAMES))
    e.add_argument("--converters", default="litert-torch,onnx2tf")
    e.add_argument("--onnx-exporter", choices=("dynamo", "torchscript"), default="dynamo", help="for onnx2tf")
    c = sub.add_parser("check")
    c.add_argument("files", nargs="+")
    c.add_argument("--batch", type=int, default=4)
    k = sub.add_parser("corpus", help="write tests/corpus's tiny litert-torch exports into OUT")
    k.add_argument("out")
    kx = sub.add_parser("keras", help="round 51's Keras models through TFLiteConverter into OUT")
    kx.add_argument("out")
    jx = sub.add_parser("jax", help="round 51's Flax NNX models through jax2onnx into OUT")
    jx.add_argument("out")
    sw = sub.add_parser("sweep", help="every command under every profile, per file: ok / refused / CRASH")
    sw.add_argument("files", nargs="+")
    sw.add_argument("--batch", type=int, default=4)
    a = ap.parse_args(argv)
    if a.cmd == "export":
        only = FRESH if a.only == "fresh" else a.only.split(",")
        export(a.out, a.batch, a.size, only, a.converters.split(","), a.onnx_exporter)
    elif a.cmd == "corpus":
        corpus(a.out)
    elif a.cmd == "keras":
        keras_export(a.out)
    elif a.cmd == "jax":
        jax_export(a.out)
    elif a.cmd == "sweep":
        sweep(a.files, a.batch)
    else:
        check(a.files, a.batch)


if __name__ == "__main__":
    main()
