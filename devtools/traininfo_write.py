"""Write circle training metadata into a circle model (dev-only: tests and fixtures; not shipped)."""
from __future__ import annotations

import flatbuffers

from memplan_cli.traininfo import METADATA_NAME

_OPT = {"sgd": 0, "adam": 1}
_LOSS = {"sparse_cce": 0, "cce": 1, "mse": 2}
_RED = {"sum_over_batch_size": 0, "sum": 1}


def build_training_metadata(*, optimizer="sgd", learning_rate=0.001, loss="mse", batch_size=0,
                            trainable=None, loss_reduction="sum_over_batch_size", epochs=0,
                            version=0) -> bytes:
    """A CTR0 flatbuffer. `trainable`: op indices (None writes no list)."""
    from memplan_cli.traininfo.circle import AdamOptions, ModelTraining, SGDOptions

    b = flatbuffers.Builder(256)
    if optimizer == "adam":
        AdamOptions.Start(b)
        AdamOptions.AddLearningRate(b, learning_rate)
        AdamOptions.AddBeta1(b, 0.9)
        AdamOptions.AddBeta2(b, 0.999)
        AdamOptions.AddEpsilon(b, 1e-7)
        opt_off, opt_type = AdamOptions.End(b), 2
    else:
        SGDOptions.Start(b)
        SGDOptions.AddLearningRate(b, learning_rate)
        opt_off, opt_type = SGDOptions.End(b), 1
    ops_off = None
    if trainable is not None:
        ModelTraining.StartTrainableOpsVector(b, len(trainable))
        for i in reversed(list(trainable)):
            b.PrependInt32(int(i))
        ops_off = b.EndVector()
    ModelTraining.Start(b)
    ModelTraining.AddVersion(b, version)
    ModelTraining.AddOptimizer(b, _OPT[optimizer])
    ModelTraining.AddOptimizerOptType(b, opt_type)
    ModelTraining.AddOptimizerOpt(b, opt_off)
    ModelTraining.AddLossfn(b, _LOSS[loss])
    ModelTraining.AddEpochs(b, epochs)
    ModelTraining.AddBatchSize(b, batch_size or 0)
    ModelTraining.AddLossReductionType(b, _RED[loss_reduction])
    if ops_off is not None:
        ModelTraining.AddTrainableOps(b, ops_off)
    b.Finish(ModelTraining.End(b), file_identifier=b"CTR0")
    return bytes(b.Output())


def add_training_metadata(circle_bytes: bytes, **fields) -> bytes:
    """Return `circle_bytes` with a CIRCLE_TRAINING metadata entry (replacing any existing one).

    Re-packs the model through circle_schema's object API, so it is meant for small models.
    """
    from circle_schema.v0_10.circle.Buffer import BufferT
    from circle_schema.v0_10.circle.Metadata import MetadataT
    from circle_schema.v0_10.circle.Model import Model, ModelT

    ident = bytes(circle_bytes[4:8])
    model = ModelT.InitFromObj(Model.GetRootAs(circle_bytes, 0))
    buf = BufferT()
    buf.data = list(build_training_metadata(**fields))
    model.buffers = list(model.buffers or []) + [buf]
    md = MetadataT()
    md.name = METADATA_NAME
    md.buffer = len(model.buffers) - 1
    keep = [m for m in (model.metadata or []) if _name(m.name) != METADATA_NAME]
    model.metadata = keep + [md]
    b = flatbuffers.Builder(1024)
    b.Finish(model.Pack(b), file_identifier=ident)
    return bytes(b.Output())


def _name(n) -> str:
    return n.decode() if isinstance(n, bytes) else (n or "")
