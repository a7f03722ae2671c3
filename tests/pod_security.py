"""Kubernetes' Pod Security Standards, "baseline" and "restricted" (the
policies of the Pod Security admission controller, as its documentation
lists them for Kubernetes 1.25 and later), checked on a pod spec without a
cluster. Each rule reads the fields the admission controller reads, with the
same defaults: a container's securityContext wins over the pod's where both
may set a field. Returns one line per violation, [] for a pod that passes."""

# Baseline: capabilities a container may add.
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL",
                         "MKNOD", "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID",
                         "SYS_CHROOT"}
BASELINE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                    "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                    "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                    "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t",
                 "container_engine_t"}
# Restricted: the only volume types.
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                      "persistentVolumeClaim", "projected", "secret"}
SECCOMP_ALLOWED = {"RuntimeDefault", "Localhost"}


def containers_of(pod: dict) -> list[dict]:
    return [*pod.get("initContainers", []), *pod.get("containers", []),
            *pod.get("ephemeralContainers", [])]


def baseline(pod: dict) -> list[str]:
    found = []
    pod_context = pod.get("securityContext", {})
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            found.append(f"host namespaces: {field}")
    if pod_context.get("windowsOptions", {}).get("hostProcess"):
        found.append("hostProcess")
    for volume in pod.get("volumes", []):
        if "hostPath" in volume:
            found.append(f"hostPath volume {volume['name']}")
    if pod_context.get("seLinuxOptions", {}).get("type", "") not in SELINUX_TYPES:
        found.append("SELinux type of the pod")
    if pod_context.get("seccompProfile", {}).get("type") == "Unconfined":
        found.append("seccomp Unconfined on the pod")
    for sysctl in pod_context.get("sysctls", []):
        if sysctl["name"] not in BASELINE_SYSCTLS:
            found.append(f"sysctl {sysctl['name']}")
    for container in containers_of(pod):
        name, context = container["name"], container.get("securityContext", {})
        if context.get("privileged"):
            found.append(f"{name}: privileged")
        if context.get("windowsOptions", {}).get("hostProcess"):
            found.append(f"{name}: hostProcess")
        added = set(context.get("capabilities", {}).get("add", []))
        if added - BASELINE_CAPABILITIES:
            found.append(f"{name}: adds capabilities {sorted(added - BASELINE_CAPABILITIES)}")
        for port in container.get("ports", []):
            if port.get("hostPort"):
                found.append(f"{name}: hostPort {port['hostPort']}")
        if context.get("seLinuxOptions", {}).get("type", "") not in SELINUX_TYPES:
            found.append(f"{name}: SELinux type")
        if context.get("procMount", "Default") != "Default":
            found.append(f"{name}: procMount {context['procMount']}")
        if context.get("seccompProfile", {}).get("type") == "Unconfined":
            found.append(f"{name}: seccomp Unconfined")
        if context.get("appArmorProfile", {}).get("type") == "Unconfined":
            found.append(f"{name}: AppArmor Unconfined")
    return found


def restricted(pod: dict) -> list[str]:
    found = baseline(pod)
    pod_context = pod.get("securityContext", {})
    for volume in pod.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            found.append(f"volume {volume['name']} of type {sorted(kinds)}")
    if pod_context.get("runAsUser") == 0:
        found.append("runAsUser 0 on the pod")
    for container in containers_of(pod):
        name, context = container["name"], container.get("securityContext", {})
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation is not false")
        if not context.get("runAsNonRoot", pod_context.get("runAsNonRoot")):
            found.append(f"{name}: runAsNonRoot is not true")
        if context.get("runAsUser") == 0:
            found.append(f"{name}: runAsUser 0")
        seccomp = context.get("seccompProfile", pod_context.get("seccompProfile", {}))
        if seccomp.get("type") not in SECCOMP_ALLOWED:
            found.append(f"{name}: seccomp profile is not RuntimeDefault or Localhost")
        capabilities = context.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []):
            found.append(f"{name}: capabilities do not drop ALL")
        added = set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}
        if added:
            found.append(f"{name}: adds capabilities {sorted(added)}")
    return found
