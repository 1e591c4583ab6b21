"""The loop and its parts: `loop` (train_one_epoch, evaluate, fit), `backend` (the device
pieces of a step), `config` (the validated parameters), `metrics`, `metrics_seg`, `optim`.
"""
