"""`GpuallocdProvisioner`: a local kernel provisioner that leases GPUs from gpuallocd first.

A kernelspec selects it by name in its metadata:

    "metadata": {"kernel_provisioner": {"provisioner_name": "gpuallocd",
                                        "config": {"count": 2, "policy": "best-effort"}}}

Every key of `config` is a trait below (`wait` is the trait `wait_for_gpus`, since a
provisioner's `wait()` is a method); a key it does not know is refused, so a typo never passes
silently.
"""

from __future__ import annotations

import asyncio
from typing import Any

from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.provisioning.local_provisioner import LocalProvisioner
from traitlets import Bool, Enum, Float, Integer, Unicode, Union

from gpuallocd_jupyter.kernel_lease import KernelLease, LeaseRequest, kernel_env

__all__ = ["GpuallocdProvisioner", "MemorySharesUnsupported"]


class MemorySharesUnsupported(ValueError):
    """The kernelspec asks for a share of a GPU's memory, which gpuallocd cannot grant yet."""


class GpuallocdProvisioner(LocalProvisioner):
    """Launches the kernel locally with CUDA_VISIBLE_DEVICES set to GPUs leased for it.

    The lease is taken before the first launch, kept across restarts, renewed while the
    kernel lives, and freed at shutdown or as soon as the kernel process dies on its own.
    """

    count = Integer(1, min=1, help="How many GPUs to lease for the kernel.").tag(config=True)
    memory = Union(
        [Integer(), Unicode()],
        default_value=None,
        allow_none=True,
        help="A share of one GPU's memory instead of whole GPUs. Not supported yet: refused.",
    ).tag(config=True)
    policy = Unicode(None, allow_none=True, help="The daemon's policy to choose GPUs.").tag(
        config=True
    )
    label = Unicode(None, allow_none=True, help="The lease's label (default jupyter:ID).").tag(
        config=True
    )
    ttl = Float(None, allow_none=True, help="Lease lifetime between renewals, seconds.").tag(
        config=True
    )
    wait_for_gpus = Bool(
        False, help="Queue until the GPUs are free instead of failing (kernelspec key: wait)."
    ).tag(config=True)
    wait_timeout = Float(None, allow_none=True, help="Give up waiting after this long.").tag(
        config=True
    )
    visible = Enum(
        ["uuid", "index"], default_value="uuid", help="CUDA_VISIBLE_DEVICES as UUIDs or indices."
    ).tag(config=True)
    socket = Unicode(None, allow_none=True, help="The daemon's socket ($GPUALLOCD_SOCKET).").tag(
        config=True
    )
    nested = Enum(
        ["reuse", "new"],
        default_value="reuse",
        help="Under a server started in a lease (GPUALLOCD_LEASE_ID): use it, or take a new one.",
    ).tag(config=True)

    def __init__(self, **kwargs: Any) -> None:
        if "wait" in kwargs:
            kwargs["wait_for_gpus"] = kwargs.pop("wait")
        unknown = sorted(set(kwargs) - set(self.class_trait_names()))
        if unknown:
            raise ValueError(
                f"unknown gpuallocd provisioner setting(s) {', '.join(unknown)} in the "
                f"kernelspec; known: {', '.join(kernelspec_keys())}"
            )
        super().__init__(**kwargs)
        self._gpus: KernelLease | None = None

    def lease_request(self) -> LeaseRequest:
        """The kernelspec's settings as a request to the daemon; refuse what it cannot grant."""
        if self.memory is not None:
            raise MemorySharesUnsupported(
                f"the kernelspec asks for memory={self.memory!r}, but gpuallocd cannot lease a "
                "share of a GPU's memory yet; remove 'memory' from "
                "metadata.kernel_provisioner.config and lease whole GPUs with 'count'"
            )
        return LeaseRequest(
            count=self.count,
            label=self.label or f"jupyter:{self.kernel_id}",
            policy=self.policy,
            ttl=self.ttl,
            wait=self.wait_for_gpus,
            wait_timeout=self.wait_timeout,
            socket=self.socket,
            nested=self.nested,
        )

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        """Prepare the launch as LocalProvisioner does, then lease and set the kernel's env."""
        if self._gpus is None:
            self._gpus = KernelLease(self.lease_request(), self.log)
        try:
            launch = await super().pre_launch(**kwargs)
            lease = await asyncio.to_thread(self._gpus.ensure)
        except BaseException:
            await self._end_lease("the kernel could not be prepared")
            raise
        launch["env"] = kernel_env(launch["env"], lease, self.visible)
        return launch

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        """Launch the kernel and watch its process; free the lease if it cannot start."""
        assert self._gpus is not None, "pre_launch comes first"
        try:
            info: KernelConnectionInfo = await super().launch_kernel(cmd, **kwargs)
        except BaseException:
            await self._end_lease("the kernel could not be launched")
            raise
        assert self.process is not None, "LocalProvisioner.launch_kernel sets it"
        self._gpus.watch(self.process, self._shutting_down)
        return info

    async def shutdown_requested(self, restart: bool = False) -> None:
        """The kernel was asked to exit: its exit is no crash."""
        if self._gpus is not None:
            self._gpus.expect_exit()
        await super().shutdown_requested(restart=restart)

    async def terminate(self, restart: bool = False) -> None:
        """SIGTERM from the kernel manager: the exit is no crash."""
        if self._gpus is not None:
            self._gpus.expect_exit()
        await super().terminate(restart=restart)

    async def kill(self, restart: bool = False) -> None:
        """SIGKILL from the kernel manager: the exit is no crash."""
        if self._gpus is not None:
            self._gpus.expect_exit()
        await super().kill(restart=restart)

    async def cleanup(self, restart: bool = False) -> None:
        """Keep the lease for a restart; free it when the kernel is shut down for good."""
        await super().cleanup(restart=restart)
        if not restart:
            await self._end_lease("the kernel was shut down")

    async def _end_lease(self, why: str) -> None:
        gpus, self._gpus = self._gpus, None
        if gpus is not None:
            await asyncio.to_thread(gpus.close, why)

    def _shutting_down(self) -> bool:
        return bool(getattr(self.parent, "shutting_down", False))


def kernelspec_keys() -> list[str]:
    """The keys `metadata.kernel_provisioner.config` may hold."""
    names = GpuallocdProvisioner.class_own_traits()
    return sorted("wait" if name == "wait_for_gpus" else name for name in names)
