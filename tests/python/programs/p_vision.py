"""Convolutional networks as vision and audio code writes them: torchvision-style blocks
(ResNet's BasicBlock and Bottleneck, a VGG stage, MobileNet's depthwise-separable and
inverted-residual blocks), LeNet, 1-d convolutions over sequences, 3-d over clips, and
the functional forms with every geometry and pooling."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpus import inference, program

r = torch.randn
torch.manual_seed(0)


def conv3x3(cin, cout, stride=1, groups=1, dilation=1):
    return nn.Conv2d(cin, cout, kernel_size=3, stride=stride, padding=dilation, groups=groups, bias=False,
                     dilation=dilation)


def conv1x1(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None, norm_layer=None):
        super().__init__()
        norm_layer = norm_layer or nn.BatchNorm2d
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = norm_layer(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = norm_layer(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None, groups=1, base_width=64, dilation=1):
        super().__init__()
        width = int(planes * (base_width / 64.0)) * groups
        self.conv1 = conv1x1(inplanes, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = conv3x3(width, width, stride, groups, dilation)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = conv1x1(width, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class TinyResNet(nn.Module):
    def __init__(self, block, layers, num_classes=10, width=8):
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, width, layers[0])
        self.layer2 = self._make_layer(block, width * 2, layers[1], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width * 2 * block.expansion, num_classes)

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(conv1x1(self.inplanes, planes * block.expansion, stride),
                                       nn.BatchNorm2d(planes * block.expansion))
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer2(self.layer1(x))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def _randomize_norms(model):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    return model


resnet_basic = _randomize_norms(inference(TinyResNet(BasicBlock, [1, 1]))).eval()
resnet_bottleneck = _randomize_norms(inference(TinyResNet(Bottleneck, [1, 1], width=4))).eval()
resnet_train = inference(TinyResNet(BasicBlock, [1, 1]))  # training mode: batch statistics


@program(inputs=lambda: r(2, 3, 32, 32), atol=1e-4, rtol=1e-4)
def resnet_basic_blocks_eval(x):
    return resnet_basic(x)


@program(inputs=lambda: r(2, 3, 32, 32), atol=1e-4, rtol=1e-4)
def resnet_bottleneck_blocks_eval(x):
    return resnet_bottleneck(x)


@program(inputs=lambda: r(4, 3, 16, 16), atol=1e-4, rtol=1e-4)
def resnet_in_training_mode_uses_batch_statistics(x):
    return resnet_train(x)


@program(inputs=lambda: r(2, 3, 32, 32).to(memory_format=torch.channels_last), atol=1e-4, rtol=1e-4)
def resnet_on_a_channels_last_batch(x):
    return resnet_basic(x)


@program(inputs=lambda n=16: r(2, 3, n, n), atol=1e-4, rtol=1e-4)
def resnet_at_any_resolution(x):
    return resnet_basic(x)


class VGGStage(nn.Module):
    def __init__(self, cfg, in_channels=3):
        super().__init__()
        layers = []
        for v in cfg:
            if v == "M":
                layers += [nn.MaxPool2d(kernel_size=2, stride=2)]
            else:
                layers += [nn.Conv2d(in_channels, v, kernel_size=3, padding=1), nn.ReLU(inplace=True)]
                in_channels = v
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((2, 2))
        self.classifier = nn.Sequential(nn.Linear(in_channels * 4, 16), nn.ReLU(True), nn.Dropout(p=0.5),
                                        nn.Linear(16, 5))

    def forward(self, x):
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


vgg = inference(VGGStage([8, "M", 16, 16, "M"])).eval()


@program(inputs=lambda: r(2, 3, 16, 16), atol=1e-4)
def vgg_features_and_classifier(x):
    return vgg(x)


class DepthwiseSeparable(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.depthwise = nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False)
        self.bn1 = nn.BatchNorm2d(cin)
        self.pointwise = nn.Conv2d(cin, cout, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)

    def forward(self, x):
        x = F.relu6(self.bn1(self.depthwise(x)))
        return F.relu6(self.bn2(self.pointwise(x)))


class InvertedResidual(nn.Module):
    def __init__(self, inp, oup, stride, expand_ratio):
        super().__init__()
        hidden = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        self.conv = nn.Sequential(
            nn.Conv2d(inp, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(inplace=True),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden),
            nn.ReLU6(inplace=True),
            nn.Conv2d(hidden, oup, 1, bias=False), nn.BatchNorm2d(oup))

    def forward(self, x):
        if self.use_res_connect:
            return x + self.conv(x)
        return self.conv(x)


separable = _randomize_norms(inference(nn.Sequential(DepthwiseSeparable(4, 8, 2), DepthwiseSeparable(8, 8)))).eval()
inverted = _randomize_norms(inference(nn.Sequential(InvertedResidual(8, 8, 1, 4), InvertedResidual(8, 12, 2, 6)))).eval()


@program(inputs=lambda: r(2, 4, 12, 12), atol=1e-4)
def mobilenet_depthwise_separable(x):
    return separable(x)


@program(inputs=lambda: r(2, 8, 10, 10), atol=1e-4)
def mobilenet_inverted_residuals(x):
    return inverted(x)


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = F.max_pool2d(torch.sigmoid(self.conv1(x)), 2)
        x = F.avg_pool2d(torch.tanh(self.conv2(x)), (2, 2))
        x = x.view(x.size(0), -1)
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


lenet = inference(LeNet())


@program(inputs=lambda: r(3, 1, 28, 28), atol=1e-4)
def lenet_on_mnist_sized_digits(x):
    return lenet(x)


class AudioFrontEnd(nn.Module):
    """1-d convolutions over a waveform's frames, as keyword-spotting models write them."""

    def __init__(self, n_input=1, n_channel=8):
        super().__init__()
        self.conv1 = nn.Conv1d(n_input, n_channel, kernel_size=16, stride=4)
        self.bn1 = nn.BatchNorm1d(n_channel)
        self.pool1 = nn.MaxPool1d(4)
        self.conv2 = nn.Conv1d(n_channel, 2 * n_channel, kernel_size=3, padding="same", dilation=2)
        self.pool2 = nn.AvgPool1d(2, ceil_mode=True)

    def forward(self, x):
        x = self.pool1(F.relu(self.bn1(self.conv1(x))))
        x = self.pool2(F.relu(self.conv2(x)))
        return F.adaptive_avg_pool1d(x, 1).squeeze(-1)


audio = _randomize_norms(inference(AudioFrontEnd())).eval()
for _m in audio.modules():
    if isinstance(_m, nn.BatchNorm1d):
        _m.running_mean.uniform_(-0.5, 0.5)
        _m.running_var.uniform_(0.5, 1.5)


@program(inputs=lambda: r(2, 1, 400), atol=1e-4)
def audio_conv1d_frontend(x):
    return audio(x)


class TextCNN(nn.Module):
    """Kim's sentence CNN: embeddings, convolutions of several widths, max over time."""

    def __init__(self, vocab=50, dim=8, widths=(2, 3, 4), filters=4):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.convs = nn.ModuleList([nn.Conv1d(dim, filters, w) for w in widths])
        self.fc = nn.Linear(filters * len(widths), 2)

    def forward(self, tokens):
        x = self.embedding(tokens).transpose(1, 2)
        pooled = [F.max_pool1d(F.relu(conv(x)), conv_out_len).squeeze(2)
                  for conv, conv_out_len in ((c, x.shape[2] - c.kernel_size[0] + 1) for c in self.convs)]
        return self.fc(torch.cat(pooled, 1))


textcnn = inference(TextCNN())


@program(inputs=lambda: torch.randint(0, 50, (3, 12)))
def text_cnn_max_over_time(tokens):
    return textcnn(tokens)


clip_net = inference(nn.Sequential(nn.Conv3d(3, 4, (3, 3, 3), padding=1), nn.ReLU(), nn.MaxPool3d((1, 2, 2)),
                                   nn.Conv3d(4, 4, 3, stride=(1, 2, 2), padding=(1, 1, 1), groups=2),
                                   nn.AdaptiveAvgPool3d(1), nn.Flatten()))


@program(inputs=lambda: r(2, 3, 4, 8, 8), atol=1e-4)
def video_conv3d_clip(x):
    return clip_net(x)


# --- the functional forms ---------------------------------------------------------

w2 = r(6, 4, 3, 3)
b2 = r(6)


@program(inputs=lambda: r(2, 4, 9, 8))
def conv2d_functional_geometry(x):
    a = F.conv2d(x, w2, b2, stride=(2, 1), padding=(1, 2), dilation=(1, 2))
    b = F.conv2d(x, w2[:, :2], None, 1, 1, 1, 2)
    return a, b


w_even = r(3, 4, 2, 4)
w_line = r(5, 3, 3)


@program(inputs=lambda: r(2, 4, 7, 6))
def conv2d_padding_same_and_valid(x):
    same = F.conv2d(x, w2, b2, padding="same")
    even = F.conv2d(x, w_even, padding="same")
    return same, even, F.conv2d(x, w2, padding="valid")


@program(inputs=lambda: r(4, 9, 8))
def conv2d_of_an_unbatched_image(x):
    return F.conv2d(x, w2, b2, padding=1)


@program(inputs=lambda n=10: r(2, 3, n))
def conv1d_over_any_length(x):
    return torch.conv1d(x, w_line, stride=2, padding=1)


@program(inputs=lambda: r(2, 4, 6, 5))
def aten_convolution_and_conv2d(x):
    a = torch.ops.aten.convolution(x, w2, b2, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    return a, torch.ops.aten.conv2d(x, w2, b2, [2, 2])


@program(inputs=lambda: r(2, 4, 8, 8).to(memory_format=torch.channels_last))
def conv_keeps_channels_last(x):
    y = F.conv2d(x, w2, b2, padding=1)
    return y, y.stride()


@program(inputs=lambda: r(2, 4, 8, 8), atol=5e-2, rtol=2e-2)
def conv_under_cpu_autocast(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = F.conv2d(x, w2, b2, padding=1)
    return y.float(), y.dtype


@program(inputs=lambda: r(2, 3, 11, 10))
def max_pool2d_every_option(x):
    return (F.max_pool2d(x, 3, 2, 1), F.max_pool2d(x, (2, 3), (1, 2), dilation=(2, 1)),
            F.max_pool2d(x, 3, 2, ceil_mode=True), torch.max_pool2d(x, 2))


@program(inputs=lambda: r(2, 3, 11, 10))
def avg_pool2d_every_option(x):
    return (F.avg_pool2d(x, 3, 2, 1), F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
            F.avg_pool2d(x, 3, 2, 1, ceil_mode=True), F.avg_pool2d(x, 3, 2, 1, True, False),
            F.avg_pool2d(x, 2, divisor_override=3))


@program(inputs=lambda: r(2, 3, 13))
def pooling_1d_and_3d(x):
    v = x.reshape(1, 2, 3, 13, 1).expand(1, 2, 3, 13, 4)
    return (F.max_pool1d(x, 3, 2, 1), F.avg_pool1d(x, 4, 3, ceil_mode=True), F.adaptive_max_pool1d(x[..., :12], 3),
            F.max_pool3d(v, (2, 3, 2)), F.avg_pool3d(v, 2, 1, 1), F.adaptive_avg_pool3d(v, (1, None, 2)))


@program(inputs=lambda: r(2, 3, 12, 8))
def adaptive_pooling_to_dividing_sizes(x):
    return (F.adaptive_avg_pool2d(x, (3, 2)), F.adaptive_max_pool2d(x, 4), F.adaptive_avg_pool2d(x, (None, 1)),
            nn.functional.adaptive_avg_pool2d(x, 1).flatten(1))


@program(inputs=lambda: r(2, 3, 8, 8))
def global_pooling_heads(x):
    gap = x.mean((2, 3))
    gmp = F.adaptive_max_pool2d(x, 1).flatten(1)
    return torch.cat([gap, gmp], 1)


@program(inputs=lambda: r(2, 3, 6, 6))
def max_pool_of_nan_and_inf(x):
    x = x.clone()
    x[0, 0, 1, 1] = float("nan")
    x[1, 2] = float("-inf")
    a, b = F.max_pool2d(x, 2), F.adaptive_max_pool2d(x, 3)
    return a.isnan(), a.nan_to_num(), b.isnan(), b.nan_to_num()


# --- what kiln compiles around ------------------------------------------------------

upsample = inference(nn.ConvTranspose2d(4, 2, 2, stride=2))


@program(inputs=lambda: r(2, 4, 5, 5))
def transposed_convolution_upsamples(x):
    return torch.relu(upsample(torch.relu(x)))


decoder = inference(nn.Sequential(
    nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2), nn.ReLU(),
    nn.ConvTranspose2d(6, 2, (2, 3), stride=(1, 2), padding=(0, 1), dilation=(2, 1))))
w_up1d = r(4, 3, 4)
w_up2d = r(4, 2, 3, 3)


@program(inputs=lambda: r(2, 4, 5, 6), atol=1e-4)
def transposed_convolutions_every_option(x):
    y = decoder(x)
    z = F.conv_transpose1d(x.flatten(2), w_up1d, stride=3, padding=4, dilation=2, output_padding=1)
    a = torch.ops.aten.convolution(x, w_up2d, None, [2, 2], [1, 1], [1, 1], True, [1, 0], 1)
    return y, z, a


unpooling_pool = nn.MaxPool2d(3, stride=2, padding=1, return_indices=True)


@program(inputs=lambda: r(2, 3, 8, 8).relu())
def max_pool_with_indices_as_segnet_keeps_them(x):
    values, indices = F.max_pool2d(x, 2, return_indices=True)
    v3, i3 = F.max_pool3d(x.unsqueeze(1), (1, 2, 2), return_indices=True)
    v1, i1 = unpooling_pool(x)
    return values * 2, indices, i3, F.max_pool2d_with_indices(x, 2)[1], i1


@program(inputs=lambda: r(2, 3, 8, 8), breaks="return_indices=True")
def adaptive_max_pool_indices_are_a_break(x):
    return F.adaptive_max_pool2d(x * 2, 3, return_indices=True)


@program(inputs=lambda: r(2, 3, 10, 7))
def adaptive_pooling_to_uneven_windows(x):
    return (F.adaptive_avg_pool2d(x * 2, (3, 3)) + 1, F.adaptive_max_pool2d(x, (4, None)),
            F.adaptive_avg_pool1d(x.flatten(2), 6), nn.functional.interpolate(x, size=(4, 3), mode="area"))


reflect = inference(nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect"))


circular = inference(nn.Conv1d(3, 4, 3, padding=1, padding_mode="circular"))
replicate = inference(nn.Conv2d(3, 2, (3, 5), padding=(1, 2), padding_mode="replicate"))


@program(inputs=lambda: r(2, 3, 6, 6))
def reflect_replicate_and_circular_padded_convolutions(x):
    return reflect(x), circular(x.flatten(2)), replicate(x)


@program(inputs=lambda: r(2, 3, 9))
def pad_modes_of_audio_frames(wave):
    return (F.pad(wave, (4, 4), mode="reflect"), F.pad(wave, (1, 5), mode="replicate"),
            F.pad(wave.unsqueeze(1), (2, 2, 0, 0), mode="circular"), F.pad(wave, (3, 0), value=-1.0))


# --- resampling ---------------------------------------------------------------------


class FPNTopDown(nn.Module):
    """A feature pyramid's top-down path: the coarser map upsampled to the finer one's size
    and added to its lateral projection."""

    def __init__(self, channels=(4, 8, 16), out=6):
        super().__init__()
        self.lateral = nn.ModuleList([nn.Conv2d(c, out, 1) for c in channels])
        self.smooth = nn.ModuleList([nn.Conv2d(out, out, 3, padding=1) for _ in channels])

    def forward(self, features):
        results = [self.lateral[-1](features[-1])]
        for feature, lateral in zip(features[-2::-1], list(self.lateral)[-2::-1]):
            top_down = F.interpolate(results[0], size=feature.shape[-2:], mode="nearest")
            results.insert(0, lateral(feature) + top_down)
        return [smooth(r) for smooth, r in zip(self.smooth, results)]


fpn = inference(FPNTopDown())


@program(inputs=lambda: ([r(2, 4, 16, 16), r(2, 8, 8, 8), r(2, 16, 4, 4)],), atol=1e-4)
def fpn_top_down_with_nearest_upsampling(features):
    return fpn(features)


upsample_bilinear = nn.Upsample(scale_factor=2, mode="bilinear")


@program(inputs=lambda: r(2, 3, 5, 7), atol=1e-5)
def interpolate_every_mode(x):
    return (F.interpolate(x, scale_factor=2), F.interpolate(x, size=(9, 4)),
            F.interpolate(x, scale_factor=(0.5, 3), mode="nearest-exact"),
            F.interpolate(x, size=(11, 13), mode="bilinear"),
            F.interpolate(x, size=(11, 13), mode="bilinear", align_corners=True),
            F.interpolate(x, scale_factor=2.3, mode="bilinear", recompute_scale_factor=True),
            F.interpolate(x[..., :6], size=(5, 3), mode="area"), upsample_bilinear(x))


@program(inputs=lambda: (r(2, 3, 9), r(1, 2, 3, 4, 5)), atol=1e-5)
def interpolate_linear_and_trilinear(sequence, volume):
    return F.interpolate(sequence, size=4, mode="linear"), F.interpolate(volume, scale_factor=2, mode="trilinear")


@program(inputs=lambda: r(2, 3, 5, 7), atol=1e-5)
def bicubic_interpolation(x):
    return (F.interpolate(x * 2, scale_factor=2, mode="bicubic", align_corners=False),
            F.interpolate(x, size=(3, 11), mode="bicubic", align_corners=True))


@program(inputs=lambda: r(2, 3, 5, 7), breaks="antialias=True")
def antialiased_downsampling_is_a_break(x):
    return F.interpolate(x * 2, size=(2, 3), mode="bilinear", antialias=True)
