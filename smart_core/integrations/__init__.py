"""SMART in other people's training loops: Hugging Face `Trainer` and accelerate (`pip install 'smartune[hf]'`).

The one part of smart_core that imports more than torch (transformers, accelerate); nothing in smart_core
outside this package imports it, so `import smart_core` stays torch-only. Every integration computes the
project's loss with the project's code (`Objective`, the momentum teacher, the precision plan), on the model
split at its embedding-layer output by the project's `EmbeddingAdapter`; none re-implements the math.

    embedding   EmbeddingAdapter, compile_encoder: the model split SMART perturbs (worker.training uses it too)
    loss        SmartLoss: `loss, parts = smart(batch)`, `smart.after_update()` after each optimiser step
    trainer     SmartTrainer: a `transformers.Trainer` that trains with SmartLoss
    accelerated AcceleratedSmart: SmartLoss in an `accelerate.Accelerator` loop, on one process or several

Minimal use (README.md, "SMART in your own Trainer / accelerate loop"; examples/hf_trainer_smart.py):

    from smart_core import MethodConfig
    from smart_core.integrations.trainer import SmartTrainer

    SmartTrainer(model=model, args=args, train_dataset=train, method=MethodConfig(lambda_s=1.0, mu=1.0)).train()
"""
