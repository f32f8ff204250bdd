package bench

// tierArms price the probe tiers beyond the default one (arms a and c
// record the default tier: faults, block requests, read calls, tokens and
// the router, with no per-folio page-cache program). The pagecache tier
// adds a hook per folio added to or evicted from any file's page cache:
// under a memory limit, from a cold cache, where those fire most, and in
// RAM. Each is measured beside the bpftrace floor of its own hooks (the
// floor script follows the probes its run attached), so each tier's cost
// reads against what merely counting on its hooks costs. An iocorr without
// the pagecache tier (an older build under test) has no such arms.
func tierArms(cfg Config) []Arm {
	if !ProbeSetExists(cfg.Iocorr, "pagecache") {
		return nil
	}
	return []Arm{
		{Name: "e memlimit cold pagecache", Probe: "pagecache", Cold: true, Floor: true},
		{Name: "f ram pagecache", Probe: "pagecache", Floor: true},
	}
}

// driverArms price the default tier on node-llama-cpp's prebuilt
// llama.cpp in RAM (Arm.Driver): the probes sit past endbr64, and the
// compute threads it starts for every graph are not stopped by the
// warden. Where the tests' npm packages are not installed, the arm says
// so (NA) instead of running.
func driverArms() []Arm {
	return []Arm{{Name: "g ram node-llama-cpp", Driver: true}}
}

// faultArms price each way a fault passes the programs, side by side
// with the arms of the default path in the same run: there every fault
// passes two (tp_btf page_fault_user begins it and resolves its file, the
// perf major/minor event ends it), a fault in a model file is a record and
// one outside them a count in the kernel. (i) and (j) record every fault
// one by one (--probe faults), as before the counts, beside (g) and (c);
// (k) takes the fallback of kernels without page_fault_user (arm64's):
// the perf page-faults event begins the fault, a perf event too. No
// kernel of 5.15-6.8 has one hook that sees a fault's start and its
// class at its end (docs/overhead.md, session 14): there is no
// one-program arm. An iocorr without --probe faults has no such arms.
func faultArms(cfg Config) []Arm {
	if !ProbeSetExists(cfg.Iocorr, "faults") {
		return nil
	}
	return []Arm{
		{Name: "i ram node-llama-cpp faults one by one", Driver: true, Probe: "faults"},
		{Name: "j memlimit cold faults one by one", Probe: "faults", Cold: true},
		{Name: "k ram node-llama-cpp perf fault begin", Driver: true, Env: []string{"IOCORR_WITHOUT=page_fault_user"}},
	}
}

// hybridArms price the default tier on a hybrid run (Arm.Hybrid): every
// layer on llama.cpp's Vulkan backend over Mesa's lavapipe, every layer's
// experts left in the model's mapping on the CPU (-ngl 99 -ncmoe 99),
// under the memory limit from a cold cache. lavapipe runs on the CPU and
// is no GPU's speed: the ratio is iocorr's cost on such a run's CPU side,
// where its probes are. Without the Vulkan build or lavapipe it is NA.
func hybridArms() []Arm {
	return []Arm{{Name: "h memlimit cold hybrid", Cold: true, Hybrid: true}}
}
