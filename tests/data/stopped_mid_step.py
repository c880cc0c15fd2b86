"""A training program stopped mid-step as Ctrl-C stops it: a KeyboardInterrupt nobody catches, after the first
iteration's forward and before its backward."""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Linear(4, 4)
loss = model(torch.randn(2, 4)).relu().sum()
raise KeyboardInterrupt
