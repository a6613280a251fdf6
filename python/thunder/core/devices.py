"""thunder's devices."""

import enum

import torch


class DeviceType(enum.Enum):
    CPU = "cpu"
    CUDA = "cuda"
    META = "meta"


class Device:
    """A device: its type and index. Compares equal to the torch.device it stands for."""

    __slots__ = ("devicetype", "index")

    def __init__(self, spec="cpu"):
        if isinstance(spec, Device):
            self.devicetype, self.index = spec.devicetype, spec.index
            return
        d = torch.device(spec)
        self.devicetype = DeviceType(d.type) if d.type in ("cpu", "cuda", "meta") else None
        if self.devicetype is None:
            raise ValueError(f"thunder does not support the device {spec!r}")
        self.index = (d.index or 0) if d.type == "cuda" else 0

    @property
    def type(self) -> str:
        return self.devicetype.value

    @property
    def _thunder_device(self) -> str:
        return str(self)

    def __str__(self) -> str:
        return f"cuda:{self.index}" if self.devicetype is DeviceType.CUDA else self.devicetype.value

    def __repr__(self) -> str:
        return f'thunder.devices.Device("{self}")'

    def __eq__(self, other) -> bool:
        if isinstance(other, (torch.device, str)):
            other = Device(other)
        if isinstance(other, Device):
            return self.devicetype == other.devicetype and self.index == other.index
        return NotImplemented

    def __hash__(self) -> int:
        return hash(str(self))


def to_torch_device(d):
    return None if d is None else torch.device(str(Device(d)))
