"""The oci provider's terminate-and-relaunch migrate (issue 41; SPEC L2, S6, D11), where
OCI offers no reboot migration and the operator turned it on (``migrate_relaunch``).

Before anything destructive, everything the new instance needs is read and written into
the operation's record as the ``LaunchInstance`` body: GetInstance (availability domain,
compartment, shape and, for a flexible shape, its shape config, display name, fault
domain, cluster placement group, capacity reservation, dedicated VM host, image and boot
volume size, metadata and extended metadata, freeform and defined tags, launch, agent,
availability, platform and instance options, placement constraints except one that pins
the bad bare-metal host itself), ListVnicAttachments + GetVnic (the primary VNIC's
subnet, private IP, hostname label, NSGs, whether it had a public IP) and GetComputeCluster
(``compute_cluster_id``: OCI's Instance does not name the compute cluster it is in, so the
operator names it; it must be ACTIVE in the instance's availability domain and
compartment). Anything missing is a refusal naming it, and nothing is sent.

Then, one step per poll, each recorded before the next is sent (a restarted controller
continues from the record, never terminating or launching twice):
``terminate`` (TerminateInstance, ``preserveBootVolume`` as configured; skipped when the
instance is already TERMINATING or TERMINATED) -> ``terminating`` (GetInstance until
TERMINATED) -> ``launch`` (LaunchInstance under an opc-retry-token from the key: a lost
answer resent is answered with the first instance) -> ``launching`` (GetInstance of the
new OCID until RUNNING). The new OCID is the node's new machine identity (D11): it is in
the operation's detail and, where the provider has a SlurmClient, in the node's Extra
under ``slurm_heal_host`` (the mark the ledger and escalation read as the node's machine).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from slurm_heal.errors import ProviderError, ProviderRefused
from slurm_heal.extra import HOST_KEY
from slurm_heal.providers._records import KeyRecords

if TYPE_CHECKING:
    from slurm_heal.slurm.base import SlurmClient

CALL = "RELAUNCH"
T = TypeVar("T")


class OciProvider(Protocol):
    """What the relaunch uses of `slurm_heal.providers.oci.OciProvider`."""

    image: str | None
    compute_cluster_id: str | None
    slurm: SlurmClient | None
    records: KeyRecords

    @property
    def _compute(self) -> Any: ...

    @property
    def _network(self) -> Any: ...

    def _call(self, what: str, fn: Callable[[], T], *, refusal: bool = False) -> T: ...
_GONE = ("TERMINATING", "TERMINATED")


def _fit(value: Any, cls: Any) -> dict[str, Any] | None:
    """``value`` (JSON of one of the Instance's parts) with only the keys that ``cls``
    (the LaunchInstanceDetails part, its subtype chosen by ``type``) takes; None when
    empty."""
    import oci

    if not isinstance(value, dict) or not value:
        return None
    if "type" in value and hasattr(cls, "get_subtype"):
        cls = getattr(oci.core.models, cls.get_subtype(value), cls)
    keys = set(cls().attribute_map.values())
    fitted = {k: v for k, v in value.items() if k in keys and v is not None}
    return fitted or None


def launch_body(p: OciProvider, inst: Any) -> dict[str, Any]:
    """The LaunchInstance body (JSON, camelCase) that relaunches ``inst`` as it is, read
    from OCI now; ProviderRefused naming what could not be read (nothing sent)."""
    import oci

    models = oci.core.models
    serialize = p._compute.base_client.sanitize_for_serialization
    raw: dict[str, Any] = serialize(inst)
    ocid = str(raw.get("id") or "")
    missing = [name for name in ("availabilityDomain", "compartmentId", "shape",
                                 "displayName") if not raw.get(name)]
    source = raw.get("sourceDetails") or {}
    image = p.image or (source.get("imageId") if source.get("sourceType") == "image"
                        else None) or raw.get("imageId")
    if not image:
        missing.append("the image it boots from (sourceDetails.imageId; it boots from a "
                       "volume: set [provider] image)")
    if missing:
        raise ProviderRefused(f"oci provider: cannot relaunch {ocid}: GetInstance does not "
                              f"give {', '.join(missing)}; nothing was sent")
    ad, compartment = str(raw["availabilityDomain"]), str(raw["compartmentId"])
    cluster_id = str(p.compute_cluster_id or "")
    cluster = p._call(f"GetComputeCluster {cluster_id}",
                      lambda: p._compute.get_compute_cluster(cluster_id).data)
    c_state = str(getattr(cluster, "lifecycle_state", ""))
    c_ad = str(getattr(cluster, "availability_domain", ""))
    if c_state != "ACTIVE" or c_ad != ad:
        raise ProviderRefused(f"oci provider: cannot relaunch {ocid} in compute cluster "
                              f"{cluster_id}: it is {c_state or '?'} in {c_ad or '?'}, the "
                              f"instance is in {ad}; nothing was sent")
    vnic = _primary_vnic(p, ocid, compartment)
    vnic_details = models.CreateVnicDetails(
        subnet_id=vnic.subnet_id, private_ip=vnic.private_ip or None,
        hostname_label=vnic.hostname_label or None, nsg_ids=vnic.nsg_ids or None,
        assign_public_ip=bool(vnic.public_ip),
        skip_source_dest_check=vnic.skip_source_dest_check,
        display_name=vnic.display_name or None,
        freeform_tags=vnic.freeform_tags or None, defined_tags=vnic.defined_tags or None)
    src: dict[str, Any] = {"sourceType": "image", "imageId": image}
    if source.get("sourceType") == "image":
        for k in ("bootVolumeSizeInGBs", "kmsKeyId", "bootVolumeVpusPerGB"):
            if source.get(k) is not None:
                src[k] = source[k]
    placement = raw.get("placementConstraintDetails") or None
    if isinstance(placement, dict) and placement.get("type") == "COMPUTE_BARE_METAL_HOST":
        placement = None  # never pin the new instance to the host it leaves
    shape = str(raw["shape"])
    details = models.LaunchInstanceDetails(
        availability_domain=ad, compartment_id=compartment, shape=shape,
        display_name=raw["displayName"], compute_cluster_id=cluster_id,
        fault_domain=raw.get("faultDomain"),
        cluster_placement_group_id=raw.get("clusterPlacementGroupId"),
        capacity_reservation_id=raw.get("capacityReservationId"),
        dedicated_vm_host_id=raw.get("dedicatedVmHostId"),
        metadata=raw.get("metadata") or None,
        extended_metadata=raw.get("extendedMetadata") or None,
        freeform_tags=raw.get("freeformTags") or None,
        defined_tags=raw.get("definedTags") or None,
        ipxe_script=raw.get("ipxeScript"),
        source_details=src, create_vnic_details=vnic_details,
        shape_config=_fit(raw.get("shapeConfig"), models.LaunchInstanceShapeConfigDetails)
        if shape.endswith(".Flex") else None,
        launch_options=_fit(raw.get("launchOptions"), models.LaunchOptions),
        agent_config=_fit(raw.get("agentConfig"), models.LaunchInstanceAgentConfigDetails),
        availability_config=_fit(raw.get("availabilityConfig"),
                                 models.LaunchInstanceAvailabilityConfigDetails),
        instance_options=_fit(raw.get("instanceOptions"), models.InstanceOptions),
        platform_config=_fit(raw.get("platformConfig"), models.LaunchInstancePlatformConfig),
        placement_constraint_details=_fit(placement, models.PlacementConstraintDetails))
    body: dict[str, Any] = serialize(details)
    return {k: v for k, v in body.items() if v is not None}


def _primary_vnic(p: OciProvider, ocid: str, compartment: str) -> Any:
    attachments = p._call(f"ListVnicAttachments {ocid}", lambda: p._compute.list_vnic_attachments(
        compartment, instance_id=ocid).data)
    attached = [a for a in attachments if str(getattr(a, "lifecycle_state", "")) == "ATTACHED"]
    vnics = [_vnic(p, str(att.vnic_id)) for att in attached]
    primary = [v for v in vnics if getattr(v, "is_primary", False)]
    if len(primary) != 1 or not getattr(primary[0], "subnet_id", None):
        raise ProviderRefused(f"oci provider: cannot relaunch {ocid}: ListVnicAttachments and "
                              f"GetVnic found {len(primary)} primary VNICs with a subnet "
                              f"(of {len(vnics)} attached); nothing was sent")
    if len(vnics) > 1:
        raise ProviderRefused(f"oci provider: cannot relaunch {ocid}: it has "
                              f"{len(vnics) - 1} secondary VNICs, which a relaunch would not "
                              "bring back; nothing was sent")
    return primary[0]


def _vnic(p: OciProvider, vnic_id: str) -> Any:
    return p._call(f"GetVnic {vnic_id}", lambda: p._network.get_vnic(vnic_id).data)


def _state(p: OciProvider, ocid: str) -> str:
    """The instance's lifecycle state; TERMINATED when OCI no longer knows it (404)."""
    try:
        inst = p._call(f"GetInstance {ocid}", lambda: p._compute.get_instance(ocid).data)
    except ProviderRefused as exc:
        if "HTTP 404" in str(exc):
            return "TERMINATED"
        raise
    return str(getattr(inst, "lifecycle_state", ""))


def advance(p: OciProvider, key: str, rec: dict[str, Any], token: str) -> None:
    """One step of the relaunch of ``rec`` (module docstring); every destructive call is
    recorded before the next step. ``token``: LaunchInstance's opc-retry-token."""
    old, node = str(rec["instance"]), str(rec["node"])
    where = f"oci relaunch of {node} ({old})"
    if rec["phase"] == "terminate":
        if _state(p, old) not in _GONE:
            p._call(f"TerminateInstance {old}", lambda: p._compute.terminate_instance(
                old, preserve_boot_volume=bool(rec["preserve_boot_volume"])))
        kept = "kept" if rec["preserve_boot_volume"] else "deleted with it"
        rec.update(phase="terminating", sent=True,
                   detail=f"{where}: TerminateInstance accepted (boot volume {kept})")
        p.records.put(key, rec)
        return
    if rec["phase"] == "terminating":
        state = _state(p, old)
        if state != "TERMINATED":
            rec["detail"] = f"{where}: waiting for {old} to terminate ({state})"
            return
        rec.update(phase="launch", detail=f"{where}: {old} TERMINATED; launching")
        p.records.put(key, rec)
    if rec["phase"] == "launch":
        body = dict(rec["launch"])
        try:
            response = p._call(f"LaunchInstance {body.get('displayName')}",
                               lambda: p._compute.launch_instance(body, opc_retry_token=token))
        except ProviderRefused as exc:
            raise ProviderRefused(f"{where}: {old} was terminated and OCI refused the "
                                  f"relaunch: {exc}; launch it by hand with the details "
                                  f"recorded under key {key!r}") from exc
        new = str(getattr(response.data, "id", "") or "")
        if not new:
            raise ProviderError("oci: LaunchInstance: no instance id in the answer")
        rec.update(phase="launching", new_instance=new,
                   work_request=str(response.headers.get("opc-work-request-id") or ""),
                   detail=f"{where}: LaunchInstance accepted: the node's new instance is "
                          f"{new}")
        p.records.put(key, rec)
        return
    new = str(rec["new_instance"])
    state = _state(p, new)
    if state == "RUNNING":
        rec.update(status="succeeded",
                   detail=f"{where}: terminated and relaunched in compute cluster "
                          f"{rec['launch'].get('computeClusterId')}: the node is now "
                          f"instance {new} (RUNNING; a new OCID, new local NVMe){_mark(p, rec)}")
    elif state in _GONE:
        rec.update(status="failed", detail=f"{where}: the relaunched instance {new} is "
                                           f"{state}: launch it by hand (details recorded "
                                           f"under key {key!r})")
    else:
        rec["detail"] = f"{where}: the new instance {new} is {state}"


def _mark(p: OciProvider, rec: dict[str, Any]) -> str:
    """Say in the node's Extra that the node is now the new instance (the machine mark the
    ledger and escalation read, SPEC D11, E7); words for the detail."""
    if p.slurm is None:
        return ""
    try:
        p.slurm.set_extra(str(rec["node"]), HOST_KEY,
                          {"host": f"instance-{rec['new_instance']}",
                           "previous": f"instance-{rec['instance']}"})
    except Exception as exc:  # noqa: BLE001 - the relaunch is done; the mark is a note
        return f"; the node's Extra mark {HOST_KEY} could not be written: {exc}"
    return f"; the node's Extra {HOST_KEY} names it"


def replaced(records: dict[str, dict[str, Any]], ocid: str) -> str:
    """The instance that a relaunch recorded here replaced ``ocid`` with (followed to the
    newest), or ``ocid``: Slurm's InstanceId still names the terminated one until the
    site updates it."""
    seen = {ocid}
    while True:
        nxt = next((str(r["new_instance"]) for r in records.values()
                    if r.get("call") == CALL and r.get("instance") == ocid
                    and r.get("new_instance")), "")
        if not nxt or nxt in seen:
            return ocid
        seen.add(nxt)
        ocid = nxt
