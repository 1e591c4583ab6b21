"""Where am I, what hardware, how many processes: platform profiles and runtime detection
(`platforms`, `clouds`), the device and precision (`device`), every torch_xla call (`xla`),
processes (`distributed`), torch.compile (`compile`) and the session clock (`clock`).
"""
