"""The machine fingerprint of env.json (harness.env.machine_fingerprint) on recorded cpuinfo
texts, and the words harness.reporting.compare.machine_match finds between two of them."""

from __future__ import annotations

import pytest

from harness import env
from harness.measuring import cpu_features
from harness.reporting import compare

#: This project's 2-core Intel Xeon VM (Sapphire Rapids class: AVX-512, AMX), its first CPU.
XEON = """processor	: 0
vendor_id	: GenuineIntel
cpu family	: 6
model		: 167
model name	: Intel(R) Xeon(R) Processor
stepping	: 1
microcode	: 0x1
cpu MHz		: 2599.998
cache size	: 491520 KB
physical id	: 0
siblings	: 2
core id		: 0
cpu cores	: 2
apicid		: 0
initial apicid	: 0
fpu		: yes
fpu_exception	: yes
cpuid level	: 36
wp		: yes
flags		: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ss ht syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc cpuid tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand hypervisor lahf_lm abm 3dnowprefetch cpuid_fault fsgsbase tsc_adjust bmi1 hle avx2 smep bmi2 erms invpcid rtm avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves avx_vnni avx512_bf16 arat avx512vbmi umip avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg avx512_vpopcntdq rdpid cldemote movdiri movdir64b fsrm serialize tsxldtrk amx_bf16 avx512_fp16 amx_tile amx_int8 arch_capabilities
bugs		: spectre_v1 spectre_v2 spec_store_bypass swapgs retbleed bhi spectre_v2_user its its_native_only
bogomips	: 5199.99
clflush size	: 64
cache_alignment	: 64
address sizes	: 48 bits physical, 57 bits virtual
power management:
"""  # noqa: E501

#: A 2-vCPU AMD EPYC VM, Zen 4 (family 25), its name hidden by the hypervisor.
ZEN4 = """processor	: 0
vendor_id	: AuthenticAMD
cpu family	: 25
model		: 17
model name	: AMD EPYC
stepping	: 1
microcode	: 0xa10113e
cpu MHz		: 3699.998
cache size	: 1024 KB
physical id	: 0
siblings	: 2
core id		: 0
cpu cores	: 1
apicid		: 0
initial apicid	: 0
fpu		: yes
fpu_exception	: yes
cpuid level	: 16
wp		: yes
flags		: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl nonstop_tsc cpuid extd_apicid aperfmperf tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand hypervisor lahf_lm cmp_legacy cr8_legacy abm sse4a misalignsse 3dnowprefetch topoext perfctr_core invpcid_single ssbd ibrs ibpb stibp vmmcall fsgsbase bmi1 avx2 smep bmi2 invpcid avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves avx512_bf16 clzero xsaveerptr rdpru wbnoinvd arat avx512vbmi pku ospke avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg avx512_vpopcntdq rdpid fsrm
bugs		: sysret_ss_attrs spectre_v1 spectre_v2 spec_store_bypass srso
bogomips	: 5199.99
TLB size	: 3584 4K pages
clflush size	: 64
cache_alignment	: 64
address sizes	: 48 bits physical, 48 bits virtual
power management:
"""  # noqa: E501

#: A VM sold under the same name on a Zen 5 host (family 26): another model, microcode and AVX-VNNI.
ZEN5 = """processor	: 0
vendor_id	: AuthenticAMD
cpu family	: 26
model		: 2
model name	: AMD EPYC
stepping	: 1
microcode	: 0xb002147
cpu MHz		: 3699.998
cache size	: 1024 KB
physical id	: 0
siblings	: 2
core id		: 0
cpu cores	: 1
apicid		: 0
initial apicid	: 0
fpu		: yes
fpu_exception	: yes
cpuid level	: 16
wp		: yes
flags		: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl nonstop_tsc cpuid extd_apicid aperfmperf tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand hypervisor lahf_lm cmp_legacy cr8_legacy abm sse4a misalignsse 3dnowprefetch topoext perfctr_core invpcid_single ssbd avx_vnni ibrs ibpb stibp vmmcall fsgsbase bmi1 avx2 smep bmi2 invpcid avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves avx512_bf16 clzero xsaveerptr rdpru wbnoinvd arat avx512vbmi pku ospke avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg avx512_vpopcntdq rdpid movdiri movdir64b fsrm avx512_vp2intersect
bugs		: sysret_ss_attrs spectre_v1 spectre_v2 spec_store_bypass srso
bogomips	: 5399.99
TLB size	: 3584 4K pages
clflush size	: 64
cache_alignment	: 64
address sizes	: 48 bits physical, 48 bits virtual
power management:
"""  # noqa: E501

#: An arm64 Graviton3 (Neoverse V1): no model name, SVE and bfloat16 in ``Features``.
GRAVITON3 = """processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs paca pacg dcpodp svei8mm svebf16 i8mm bf16 dgh rng
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x1
CPU part\t: 0xd40
CPU revision\t: 1

processor\t: 1
BogoMIPS\t: 2100.00
"""  # noqa: E501


def machine(cpuinfo: str | None, **extra) -> dict:
    """A fingerprint of a 2-core VM with ``cpuinfo``, as env.json carries it."""
    found = dict(kernel="6.8.0-1021-aws", architecture="x86_64", cores=2, physical_cores=1, memory_bytes=8 * 2**30)
    return env.machine_fingerprint(cpuinfo, **{**found, **extra})


def test_an_intel_xeon_vm_is_read_from_its_cpuinfo():
    found = machine(XEON)
    assert {k: found[k] for k in ("vendor", "family", "model", "stepping", "microcode", "model_name")} == {
        "vendor": "GenuineIntel",
        "family": 6,
        "model": 167,
        "stepping": 1,
        "microcode": "0x1",
        "model_name": "Intel(R) Xeon(R) Processor",
    }
    assert {"avx2", "avx512f", "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_bf16", "amx_tile", "amx_int8"} <= set(
        found["flags"]
    )
    assert not {"smep", "hypervisor", "constant_tsc", "sse2"} & set(found["flags"]), "only what kernels dispatch on"
    assert found["flags"] == sorted(found["flags"])
    assert found["hypervisor"] == "unknown vendor", "the hypervisor flag without a DMI vendor"
    assert (found["kernel"], found["cores"], found["memory_gib"], found["gpus"]) == ("6.8.0-1021-aws", 2, 8.0, [])


def test_two_amd_epyc_vms_of_one_name_come_apart():
    zen4, zen5 = machine(ZEN4), machine(ZEN5)
    assert zen4["model_name"] == zen5["model_name"] == "AMD EPYC"
    assert (zen4["vendor"], zen4["family"], zen4["model"], zen4["microcode"]) == ("AuthenticAMD", 25, 17, "0xa10113e")
    assert (zen5["family"], zen5["model"], zen5["microcode"]) == (26, 2, "0xb002147")
    assert "avx512_bf16" in zen4["flags"] and "amx_bf16" not in zen4["flags"]
    assert set(zen5["flags"]) - set(zen4["flags"]) == {"avx_vnni", "avx512_vp2intersect"}
    assert cpu_features.cpu_bf16(ZEN4)[0], "the bfloat16 check reads the same flags"


@pytest.mark.parametrize(
    ("extra", "hypervisor"),
    [
        ({}, "unknown vendor"),
        ({"dmi_vendor": "Amazon EC2", "product": "c7a.large"}, "Amazon EC2"),
        ({"hypervisor_type": "xen"}, "xen"),
    ],
)
def test_the_hypervisor_is_named_where_the_machine_says_it(extra, hypervisor):
    assert machine(ZEN4, **extra)["hypervisor"] == hypervisor
    bare = ZEN4.replace(" hypervisor ", " ")
    assert machine(bare, dmi_vendor="Amazon EC2")["hypervisor"] == "none", "a metal instance: no hypervisor flag"


def test_arm64_and_a_machine_without_cpuinfo_degrade_to_what_they_say():
    arm = machine(GRAVITON3, architecture="aarch64", cpu_name="aarch64")
    assert (arm["vendor"], arm["family"], arm["model"], arm["stepping"]) == ("0x41", 8, "0xd40", "0x1 r1")
    assert arm["flags"] == [
        "asimd", "asimddp", "asimdfhm", "asimdhp", "asimdrdm", "bf16", "fphp", "i8mm", "sve", "svebf16", "svei8mm"
    ]  # fmt: skip
    assert arm["model_name"] == "aarch64" and arm["microcode"] is None and arm["hypervisor"] is None
    mac = machine(None, cpu_name="Apple M2 Pro", architecture="arm64")
    assert mac["model_name"] == "Apple M2 Pro" and mac["flags"] is None and mac["vendor"] is None
    assert set(mac) == set(arm), "every fingerprint has the same fields"


def test_env_json_carries_the_machine_and_the_pooling_key_stays_coarse(tmp_path, monkeypatch):
    (tmp_path / "cpuinfo").write_text(ZEN4)
    monkeypatch.setenv(cpu_features.CPUINFO_ENV, str(tmp_path / "cpuinfo"))
    here = env.machine_kind()
    assert (here["vendor"], here["model"], here["model_name"]) == ("AuthenticAMD", 17, "AMD EPYC")
    assert set(here) == set(machine(None))
    # records pool rounds by harness.env.fingerprint: nothing finer (no microcode, no kernel) enters it
    assert set(env.fingerprint()) == {"cpu", "cores", "gpus", "driver"}


def envs(a: dict | None, b: dict | None) -> tuple[dict, dict]:
    """Two env.json contents with ``a`` and ``b`` as their machines (None: an older env.json)."""
    base = {"cpu": "AMD EPYC", "cpu_logical": 2, "cpu_physical": 1, "memory_gib": 8.0, "gpus": []}
    return ({**base, "machine_kind": a} if a else base), ({**base, "machine_kind": b} if b else base)


def test_one_machine_kind_is_the_same():
    found = compare.machine_match(*envs(machine(ZEN4), machine(ZEN4, memory_bytes=int(7.8 * 2**30))))
    assert found.same is True and found.differences == () and found.unknown == ()


def test_another_microcode_is_another_machine():
    later = ZEN4.replace("0xa10113e", "0xa101148")
    found = compare.machine_match(*envs(machine(ZEN4), machine(later)))
    assert found.same is False and found.differences == ("microcode 0xa10113e vs 0xa101148",)


def test_the_epyc_vms_of_the_issue_differ_in_model_microcode_and_flags():
    found = compare.machine_match(*envs(machine(ZEN4), machine(ZEN5, kernel="6.8.0-1024-aws", cores=4)))
    assert found.differences == (
        "CPU family 25 vs 26",
        "CPU model 17 vs 2",
        "microcode 0xa10113e vs 0xb002147",
        "avx512_vp2intersect, avx_vnni only in B",
        "logical cores 2 vs 4",
        "kernel 6.8.0-1021-aws vs 6.8.0-1024-aws",
    )
    found = compare.machine_match(*envs(machine(XEON), machine(ZEN4)))
    assert "CPU vendor GenuineIntel vs AuthenticAMD" in found.differences
    assert "amx_bf16, amx_int8, amx_tile, avx512_fp16, avx_vnni only in A" in found.differences
    assert "sse4a only in B" in found.differences


def test_an_older_env_json_is_compared_on_what_it_has_and_never_called_the_same():
    found = compare.machine_match(*envs(None, machine(ZEN4)))
    assert found.same is None and found.differences == ()
    assert found.unknown == (
        "A's env.json has no machine fingerprint (an older run): only its CPU name, cores, memory and GPUs are known",
    )
    both_old = compare.machine_match(*envs(None, None))
    assert both_old.same is None and len(both_old.unknown) == 2
    found = compare.machine_match(*envs(None, machine(XEON)))
    assert found.same is False and found.differences == ("CPU name AMD EPYC vs Intel(R) Xeon(R) Processor",)
    assert compare.machine_match({}, envs(None, None)[1]).unknown[0] == "A has no env.json"


def test_a_field_one_side_could_not_read_leaves_the_match_incomplete():
    found = compare.machine_match(*envs(machine(ZEN4), machine(None, cpu_name="AMD EPYC")))
    assert found.same is None
    assert "CPU model unknown in B" in found.unknown and "microcode unknown in B" in found.unknown
    arm = machine(GRAVITON3, architecture="aarch64")
    assert compare.machine_match(*envs(arm, arm)).same is True, "what arm64 never says is not missing"


def test_the_two_vms_called_amd_epyc_are_told_apart_by_their_committed_env_json():
    """The model file run of 2026-11-26 and the one-hour run of 2026-11-28 ran on VMs of one CPU
    name whose kernel floors differ about 2.5x: their env.json (before ``machine_kind``) differ in
    the kernel build Python's platform string records, and compare says so."""
    import json

    from tests.conftest import EVIDENCE

    older = json.loads((EVIDENCE / "2026-11-26-cpu-model-residual-cnn" / "env.json").read_text())
    hour = json.loads((EVIDENCE / "2026-11-28-cpu-all-1h" / "env.json").read_text())
    found = compare.machine_match(older, hour)
    assert found.same is False and "kernel 6.18.44-fc-v595 vs 6.18.44-fc-v657" in found.differences
    assert compare.machine_match(hour, hour).same is not False


def test_the_committed_default_run_and_strategy_studies_ran_on_one_machine():
    """Issue 68: the answer to "what does a static graph buy here" is measured on the default run's
    machine: their fingerprints match field by field, and differ from the one-hour run's."""
    import json

    from tests.conftest import EVIDENCE

    def env(name: str) -> dict:
        return json.loads((EVIDENCE / name / "env.json").read_text())

    default = env("2026-11-28-xeon-cpu-default-30m")
    studies = [env(f"2026-11-28-xeon-cpu-{w}-strategies") for w in ("rnn-caption", "transformer")]
    for study in studies:
        found = compare.machine_match(default, study)
        assert found.same is True, (found.differences, found.unknown)
    hour = compare.machine_match(default, env("2026-11-28-cpu-all-1h"))
    assert hour.same is not True and hour.differences
