"""A PyTorch training script ported to baregrad (docs/porting_from_pytorch.md) trains to the same loss curve.

The two scripts below are the same program: a small ResNet-style CNN (conv-BN-ReLU, a residual block, global average
pooling, a linear head), SGD with momentum and weight decay under a StepLR schedule, a DataLoader over a
TensorDataset, train mode for the steps and eval mode (running statistics) after. The baregrad script differs from
the PyTorch one only in its imports and in loading PyTorch's initial weights; both run on the same data, and every
step's loss, the final weights and BatchNorm's running statistics agree within float32 tolerance."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

def make_data(n: int = 48, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((n, 3, 8, 8)).astype(np.float32)
  y = (x[:, 0].mean((1, 2)) > 0).astype(np.int64) + 2 * (x[:, 1].mean((1, 2)) > 0).astype(np.int64)   # 4 learnable classes
  return x, y

# ---- the PyTorch script
def pytorch_script(x_np, y_np, steps_log):
  import torch.nn as nn
  import torch.nn.functional as F
  from torch.utils.data import DataLoader, TensorDataset

  class Block(nn.Module):
    def __init__(self, c):
      super().__init__()
      self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
      self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
    def forward(self, x):
      out = F.relu(self.bn1(self.conv1(x)))
      return F.relu(self.bn2(self.conv2(out)) + x)

  class Net(nn.Module):
    def __init__(self, classes=4):
      super().__init__()
      self.stem, self.bn = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
      self.block = Block(8)
      self.head = nn.Linear(8, classes)
    def forward(self, x):
      x = F.relu(self.bn(self.stem(x)))
      x = F.max_pool2d(self.block(x), 2)
      return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))

  torch.manual_seed(0)
  model = Net()
  init = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
  opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
  sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
  loader = DataLoader(TensorDataset(torch.tensor(x_np), torch.tensor(y_np)), batch_size=16)
  loss_fn = nn.CrossEntropyLoss()
  model.train()
  for epoch in range(3):
    for x, y in loader:
      opt.zero_grad()
      loss = loss_fn(model(x), y)
      loss.backward()
      opt.step()
      steps_log.append(loss.item())
    sched.step()
  model.eval()
  with torch.no_grad(): logits = model(torch.tensor(x_np[:8])).numpy()
  return init, {k: v.detach().numpy() for k, v in model.state_dict().items()}, logits

# ---- the same script in baregrad: the imports change, and it starts from PyTorch's initial weights
def baregrad_script(x_np, y_np, steps_log, init):
  import baregrad
  import baregrad.nn as nn
  import baregrad.nn.functional as F
  from baregrad.data import DataLoader, TensorDataset

  class Block(nn.Module):
    def __init__(self, c):
      super().__init__()
      self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
      self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
    def forward(self, x):
      out = F.relu(self.bn1(self.conv1(x)))
      return F.relu(self.bn2(self.conv2(out)) + x)

  class Net(nn.Module):
    def __init__(self, classes=4):
      super().__init__()
      self.stem, self.bn = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
      self.block = Block(8)
      self.head = nn.Linear(8, classes)
    def forward(self, x):
      x = F.relu(self.bn(self.stem(x)))
      x = F.max_pool2d(self.block(x), 2)
      return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))

  baregrad.manual_seed(0)
  model = Net()
  model.load_state_dict(init)          # PyTorch's initial weights (NumPy arrays load as they are)
  opt = baregrad.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
  sched = baregrad.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
  loader = DataLoader(TensorDataset(baregrad.tensor(x_np), baregrad.tensor(y_np)), batch_size=16)
  loss_fn = nn.CrossEntropyLoss()
  model.train()
  for epoch in range(3):
    for x, y in loader:
      opt.zero_grad()
      loss = loss_fn(model(x), y)
      loss.backward()
      opt.step()
      steps_log.append(loss.item())
    sched.step()
  model.eval()
  with baregrad.no_grad(): logits = model(baregrad.tensor(x_np[:8])).numpy()
  return {k: v.numpy() for k, v in model.state_dict().items()}, logits

def test_ported_script_trains_like_pytorch():
  x, y = make_data()
  lt: list[float] = []
  lb: list[float] = []
  init, sd_t, logits_t = pytorch_script(x, y, lt)
  sd_b, logits_b = baregrad_script(x, y, lb, init)
  assert len(lb) == len(lt) == 9
  np.testing.assert_allclose(lb, lt, rtol=1e-4, atol=1e-5)
  assert lt[-1] < lt[0]   # it learns: the comparison is over a moving curve
  assert sd_b.keys() == sd_t.keys()
  for k in sd_t: np.testing.assert_allclose(sd_b[k], sd_t[k], rtol=2e-4, atol=2e-5, err_msg=k)
  np.testing.assert_allclose(logits_b, logits_t, rtol=2e-4, atol=2e-4)   # eval mode: the running statistics
