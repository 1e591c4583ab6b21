"""What a run leaves on disk: the run folder (`folder`), the experiment's identity and an
attached earlier run (`identity`), checkpoints (`checkpoints`) and metrics.jsonl (`records`,
read without torch).
"""
