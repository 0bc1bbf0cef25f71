"""PyTorch's examples/super_resolution (main.py, model.py and super_resolve.py): an
efficient sub-pixel CNN (convolutions, then nn.PixelShuffle) learns to upscale by 2,
Adam on the MSE, PSNR on the test set, a checkpoint of the whole model each epoch
(``torch.save(model, path)``), loaded back to super-resolve. On the 8x8 digits
(``DATA``, given by the test; the input is each digit averaged down to 4x4) instead of
BSDS300's luminance, checkpoints in ``OUT`` (set by the test), more epochs."""
import os
import types
from math import log10

import numpy as np
import torch
import torch.nn as nn
import torch.nn.init as init
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset

DATA = None  # (x_train, y_train, x_test, y_test) NumPy arrays, set by the test
OUT = None  # the checkpoints' directory, set by the test
opt = types.SimpleNamespace(upscale_factor=2, batchSize=64, testBatchSize=10, nEpochs=6,
                            lr=0.01, device="cpu", seed=123)


class Net(nn.Module):
    def __init__(self, upscale_factor):
        super(Net, self).__init__()

        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, 64, (5, 5), (1, 1), (2, 2))
        self.conv2 = nn.Conv2d(64, 64, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(64, 32, (3, 3), (1, 1), (1, 1))
        self.conv4 = nn.Conv2d(32, upscale_factor ** 2, (3, 3), (1, 1), (1, 1))
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)

        self._initialize_weights()

    def forward(self, x):
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        x = self.relu(self.conv3(x))
        x = self.pixel_shuffle(self.conv4(x))
        return x

    def _initialize_weights(self):
        init.orthogonal_(self.conv1.weight, init.calculate_gain('relu'))
        init.orthogonal_(self.conv2.weight, init.calculate_gain('relu'))
        init.orthogonal_(self.conv3.weight, init.calculate_gain('relu'))
        init.orthogonal_(self.conv4.weight)


def dataset(images, upscale_factor):
    """(input, target) pairs: the image averaged down by ``upscale_factor``, and itself."""
    f = upscale_factor
    target = images.reshape(-1, 1, 8, 8).astype(np.float32)
    input = target.reshape(-1, 1, 8 // f, f, 8 // f, f).mean(axis=(3, 5))
    return TensorDataset(torch.from_numpy(np.ascontiguousarray(input)),
                         torch.from_numpy(target))


def main():
    torch.manual_seed(opt.seed)
    device = torch.device(opt.device)

    print('===> Loading datasets')
    x_train, _, x_test, _ = DATA
    train_set = dataset(x_train, opt.upscale_factor)
    test_set = dataset(x_test, opt.upscale_factor)
    training_data_loader = DataLoader(dataset=train_set, batch_size=opt.batchSize, shuffle=True)
    testing_data_loader = DataLoader(dataset=test_set, batch_size=opt.testBatchSize,
                                     shuffle=False)

    print('===> Building model')
    model = Net(upscale_factor=opt.upscale_factor).to(device)
    criterion = nn.MSELoss()

    optimizer = optim.Adam(model.parameters(), lr=opt.lr)

    def train(epoch):
        epoch_loss = 0
        for iteration, batch in enumerate(training_data_loader, 1):
            input, target = batch[0].to(device), batch[1].to(device)

            optimizer.zero_grad()
            loss = criterion(model(input), target)
            epoch_loss += loss.item()
            loss.backward()
            optimizer.step()

        print("===> Epoch {} Complete: Avg. Loss: {:.4f}".format(
            epoch, epoch_loss / len(training_data_loader)))
        return epoch_loss / len(training_data_loader)

    def test():
        avg_psnr = 0
        with torch.no_grad():
            for batch in testing_data_loader:
                input, target = batch[0].to(device), batch[1].to(device)

                prediction = model(input)
                mse = criterion(prediction, target)
                psnr = 10 * log10(1 / mse.item())
                avg_psnr += psnr
        print("===> Avg. PSNR: {:.4f} dB".format(avg_psnr / len(testing_data_loader)))
        return avg_psnr / len(testing_data_loader)

    def checkpoint(epoch):
        model_out_path = os.path.join(OUT, "model_epoch_{}.pth".format(epoch))
        torch.save(model, model_out_path)
        print("Checkpoint saved to {}".format(model_out_path))
        return model_out_path

    for epoch in range(1, opt.nEpochs + 1):
        train_loss = train(epoch)
        psnr = test()
        model_out_path = checkpoint(epoch)

    # super_resolve.py: the last checkpoint upscales one test image
    input, target = test_set[0]
    model = torch.load(model_out_path, weights_only=False)
    out = model(input.view(1, -1, input.size(1), input.size(2)))
    out_img_y = out[0].detach().numpy()
    out_img_y *= 255.0
    out_img_y = out_img_y.clip(0, 255)
    resolved_mse = float(((out_img_y / 255.0 - target.numpy()) ** 2).mean())

    # the baseline: each low-resolution pixel repeated (nearest-neighbour upscaling)
    f = opt.upscale_factor
    low = test_set.tensors[0].numpy()
    nearest = low.repeat(f, axis=2).repeat(f, axis=3)
    nearest_psnr = 10 * log10(1 / float(((nearest - test_set.tensors[1].numpy()) ** 2).mean()))
    return {"psnr": psnr, "train_loss": train_loss, "nearest_psnr": nearest_psnr,
            "out_shape": tuple(out.shape), "resolved_mse": resolved_mse}
