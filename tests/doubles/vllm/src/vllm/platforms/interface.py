"""TEST DOUBLE's stand-in of the real module `vllm.platforms.interface`: `DeviceCapability` and the `Platform`
methods the double's modules call (capability tests, `is_cuda`, `is_xpu`, `support_deep_gemm`)."""

from __future__ import annotations

from typing import NamedTuple


class DeviceCapability(NamedTuple):
    major: int
    minor: int

    def as_version_str(self) -> str:
        return f"{self.major}.{self.minor}"

    def to_int(self) -> int:
        """Express device capability as an integer ``<major><minor>``.

        It is assumed that the minor version is always a single digit.
        """
        assert 0 <= self.minor < 10
        return self.major * 10 + self.minor


class Platform:
    device_name: str = "unknown"
    device_type: str = "unknown"

    def is_cuda(self) -> bool:
        return False

    def is_xpu(self) -> bool:
        return False

    @classmethod
    def get_device_capability(cls, device_id: int = 0) -> DeviceCapability | None:
        return None

    @classmethod
    def has_device_capability(cls, capability: tuple[int, int] | int, device_id: int = 0) -> bool:
        """Test whether this platform is compatible with a device capability (a tuple `(major, minor)` or an
        integer `<major><minor>`)."""
        current_capability = cls.get_device_capability(device_id=device_id)
        if current_capability is None:
            return False
        if isinstance(capability, tuple):
            return current_capability >= capability
        return current_capability.to_int() >= capability

    @classmethod
    def is_device_capability(cls, capability: tuple[int, int] | int, device_id: int = 0) -> bool:
        current_capability = cls.get_device_capability(device_id=device_id)
        if current_capability is None:
            return False
        if isinstance(capability, tuple):
            return current_capability == capability
        return current_capability.to_int() == capability

    @classmethod
    def is_device_capability_family(cls, capability: int, device_id: int = 0) -> bool:
        """Whether the device's capability is in the family `capability` (e.g. 100 for 10.x)."""
        current_capability = cls.get_device_capability(device_id=device_id)
        if current_capability is None:
            return False
        return (current_capability.to_int() // 10) == (capability // 10)

    @classmethod
    def support_deep_gemm(cls) -> bool:
        """Returns if DeepGEMM is supported by the current platform."""
        return False
