//go:build linux

package prefetch

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/internal/cgroup"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/internal/pagecache"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/testenv"
	"github.com/iocorr/iocorr/wire"
)

// The prefetcher re-executes the test binary as its helper.
func TestMain(m *testing.M) {
	RunHelperIfChild()
	os.Exit(m.Run())
}

// moeFile writes a small MoE model, synced and evicted, and gives it as
// the recorder would (its dev and ino).
func moeFile(t *testing.T) (rundir.ModelFile, *gguf.File) {
	t.Helper()
	// On the disk, not a tmpfs: its pages must leave and come back.
	path := filepath.Join(filepath.Dir(testenv.DiskFile(t, nil)), "moe.gguf")
	spec := gguf.SynthSpec{Layers: 2, Embd: 256, FF: 512, Heads: 4, Experts: 4, ExpertsUsed: 2, Type: gguf.TypeF16}
	if _, err := gguf.CreateSynth(path, spec); err != nil {
		t.Fatal(err)
	}
	if _, _, err := pagecache.Evict(path); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return rundir.ModelFile{Path: path, Dev: kernel.Dev(unix.Major(st.Dev), unix.Minor(st.Dev)), Ino: st.Ino}, f
}

// picks is the router event of one layer picking ids for one token.
func picks(token uint32, layer int, ids ...int32) *wire.ExpertsEvent {
	e := &wire.ExpertsEvent{N_used: uint32(len(ids)), N_tokens: 1, Count: uint32(len(ids))}
	e.Hdr.Token = token
	copy(e.Ids[:], ids)
	for i, c := range fmt.Sprintf("ffn_moe_weights-%d", layer) {
		e.Name[i] = int8(c)
	}
	return e
}

// TestTheHelpersReadsAreChargedToTheCommandsCgroup asks for two experts
// of a layer from a cold file with the helper in a fresh memory cgroup:
// exactly their slices come into the page cache (mincore), and the
// cgroup's own page-cache counter holds them, so the prefetcher's reads
// count against the command's budget, not iocorr's.
func TestTheHelpersReadsAreChargedToTheCommandsCgroup(t *testing.T) {
	testenv.RequireRoot(t)
	mf, f := moeFile(t)
	cg, err := cgroup.NewMemory(fmt.Sprintf("iocorr-test-prefetch-%d", os.Getpid()), 256<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Remove()
	var issued []Issue
	p, err := Start(Config{Issued: func(is Issue) { issued = append(issued, is) }}, []rundir.ModelFile{mf}, cg.Add, true)
	if err != nil {
		t.Fatal(err)
	}
	p.OnPicks(picks(1, 1, 3, 0))
	p.OnPicks(picks(1, 1, 0)) // the same layer's other row: nothing new
	rep := p.Close()

	want := map[[2]int64]bool{}
	var wantBytes int64
	for _, tn := range f.TensorsByOffset() {
		if tn.Layer == 1 && tn.Experts > 0 {
			for _, e := range []int{3, 0} {
				a, b := tn.ExpertRange(e)
				want[[2]int64{a, b}] = true
				wantBytes += b - a
			}
		}
	}
	got := map[[2]int64]bool{}
	for _, is := range issued {
		got[[2]int64{is.Off, is.Off + is.Len}] = true
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || len(issued) != len(want) {
		t.Fatalf("asked for %v, want the slices %v", got, want)
	}
	// WILLNEED returns once the reads are asked for, before their pages
	// are in the cache (seen on 6.18): wait for them, boundedly.
	ps := int64(kernel.PageSize)
	var inSlices, resident int64
	for try := 0; try < 200; try++ {
		var ranges [][2]int64
		if ranges, resident, err = pagecache.ResidentRanges(mf.Path); err != nil {
			t.Fatal(err)
		}
		inSlices = 0
		for _, r := range ranges {
			for p := r[0]; p < r[1]; p++ {
				for s := range want {
					if p*ps+ps > s[0] && p*ps < s[1] {
						inSlices++
						break
					}
				}
			}
		}
		if inSlices*ps >= wantBytes {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if inSlices*ps < wantBytes || rep.AskedBytes < wantBytes || rep.AskedBytes > wantBytes+int64(len(want))*ps {
		t.Errorf("%d of the slices' %d bytes resident (%d pages of the file), %d asked", inSlices*ps, wantBytes, resident, rep.AskedBytes)
	}
	c := cg.Counters()
	charged := max(c["memory.stat.file"], c["memory.stat.total_cache"])
	if int64(charged) < inSlices*ps {
		t.Errorf("the cgroup holds %d bytes of page cache, the helper brought %d in: %v", charged, inSlices*ps, c)
	}
	if rep.Picks != 1 || rep.Ranges != uint64(len(want)) || rep.Failed != 0 || len(rep.Errors) > 0 || rep.HelperCPUNS <= 0 || rep.SelfCPUNS < 0 {
		t.Errorf("report %+v", rep)
	}
}

// TestTheWindowBoundsALayersAsk: a window smaller than a layer's picked
// slices asks for that much and counts the rest over it.
func TestTheWindowBoundsALayersAsk(t *testing.T) {
	testenv.RequireRoot(t)
	mf, _ := moeFile(t)
	const window = 64 << 10
	p, err := Start(Config{Window: window}, []rundir.ModelFile{mf}, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	p.OnPicks(picks(1, 0, 1, 2))
	p.OnPicks(picks(2, 0, 1, 2))
	rep := p.Close()
	if rep.AskedBytes > 2*window || rep.OverWindowBytes == 0 || rep.AskedBytes+rep.OverWindowBytes+rep.DroppedBytes+rep.ResidentBytes != rep.Bytes {
		t.Errorf("window %d: %+v", window, rep)
	}
}

// TestTheHelperSpeaksItsProtocol runs the helper's loop on a file: each
// ask is answered with its sequence number and no error, and a line it
// does not know ends it with an error.
func TestTheHelperSpeaksItsProtocol(t *testing.T) {
	path := testenv.DiskFile(t, bytes.Repeat([]byte{7}, 1<<20))
	tests := []struct {
		name, in, wantOut, wantErr string
	}{
		{"asks", fmt.Sprintf("o 0 %s\nw 1 0 0 4096\nw 2 0 65536 131072\n", path), "d 1 * 0\nd 2 * 0\n", ""},
		{"unopened file", "w 1 3 0 4096\n", "", "never opened"},
		{"unknown line", "x\n", "", "bad line"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			w := bufio.NewWriter(&out)
			err := serve(strings.NewReader(tc.in), w)
			w.Flush()
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
			var got strings.Builder
			for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
				if f := strings.Fields(l); len(f) == 4 {
					fmt.Fprintf(&got, "%s %s * %s\n", f[0], f[1], f[3])
				}
			}
			if got.String() != tc.wantOut {
				t.Errorf("said %q, want %q", got.String(), tc.wantOut)
			}
		})
	}
}

// TestLayersAsksForTheNextLayersDenseWeightsAfterTheExperts: with Layers,
// a layer's first pick asks for its experts' slices, then for every dense
// tensor of the next layer, once; the last layer's, for the output head
// (its norm, then its projection), which the graph reads next.
func TestLayersAsksForTheNextLayersDenseWeightsAfterTheExperts(t *testing.T) {
	testenv.RequireRoot(t)
	mf, f := moeFile(t)
	var issued []Issue
	p, err := Start(Config{Layers: true, Issued: func(is Issue) { issued = append(issued, is) }}, []rundir.ModelFile{mf}, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	p.OnPicks(picks(1, 0, 2))
	p.OnPicks(picks(1, 0, 1))
	p.OnPicks(picks(1, 1, 0))
	rep := p.Close()
	var want []string
	for _, e := range []struct {
		layer, expert int
		dense         bool
	}{{0, 2, false}, {1, -1, true}, {0, 1, false}, {1, 0, false}} {
		if !e.dense {
			want = append(want, expertSlices(e.layer, e.expert)...)
			continue
		}
		for _, tn := range f.TensorsByOffset() {
			if tn.Layer == e.layer && tn.Experts == 0 {
				want = append(want, fmt.Sprintf("%s/%d", tn.Name, e.expert))
			}
		}
	}
	want = append(want, "output_norm.weight/-1", "output.weight/-1")
	var got []string
	for _, is := range issued {
		got = append(got, fmt.Sprintf("%s/%d", is.Tensor, is.Expert))
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("asked for\n%v\nwant\n%v", got, want)
	}
	if !rep.Layers || rep.Ranges != uint64(len(want)) {
		t.Errorf("report %+v", rep)
	}
}

// The output head is the output norm and projection, in that order; a
// model without a projection of its own (tied) reads the token embedding
// in its place.
func TestTheHeadIsTheOutputNormThenTheProjectionOrTheTiedEmbedding(t *testing.T) {
	tensor := func(name, role string, layer int) *gguf.Tensor {
		return &gguf.Tensor{Name: name, Role: role, Layer: layer}
	}
	embd, norm, out := tensor("token_embd.weight", "token_embd", -1), tensor("output_norm.weight", "output_norm", -1), tensor("output.weight", "output", -1)
	blk := tensor("blk.0.attn_q.weight", "attn_q", 0)
	for _, tc := range []struct {
		name string
		ts   []*gguf.Tensor
		want []*gguf.Tensor
	}{
		{"its own projection", []*gguf.Tensor{embd, blk, out, norm}, []*gguf.Tensor{norm, out}},
		{"tied: the token embedding", []*gguf.Tensor{embd, blk, norm}, []*gguf.Tensor{norm, embd}},
		{"no head tensors: none", []*gguf.Tensor{blk}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := head(tc.ts); !slices.Equal(got, tc.want) {
				t.Errorf("head %v, want %v", names(got), names(tc.want))
			}
		})
	}
}

func names(ts []*gguf.Tensor) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Name)
	}
	return out
}

// expertSlices are the names ("tensor/expert") of the slices of experts
// of a layer in the order the graph reads them: each expert tensor for
// every expert before the next tensor, gate, up, down.
func expertSlices(layer int, experts ...int) []string {
	var out []string
	for _, role := range []string{"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"} {
		for _, e := range experts {
			out = append(out, fmt.Sprintf("blk.%d.%s.weight/%d", layer, role, e))
		}
	}
	return out
}

// One pick of two experts asks for their slices in the graph's order:
// both gates, both ups, both downs (the file holds gate, down, up), so
// that the helper is never asking for the second expert's gate while the
// graph already reads it.
func TestAPicksSlicesAreAskedInTheOrderTheGraphReadsThem(t *testing.T) {
	testenv.RequireRoot(t)
	mf, _ := moeFile(t)
	var got []string
	p, err := Start(Config{Issued: func(is Issue) { got = append(got, fmt.Sprintf("%s/%d", is.Tensor, is.Expert)) }}, []rundir.ModelFile{mf}, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	p.OnPicks(picks(1, 1, 3, 0))
	p.Close()
	if want := expertSlices(1, 3, 0); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("asked for\n%v\nwant\n%v", got, want)
	}
}

// A split model's layers and head lie in several files: the next
// layer's dense weights are asked from the file that holds them, and the
// head at the model's last layer (not at each file's), from its file.
func TestLayersAsksAcrossASplitModelsFiles(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "split")
	exps := func(l int) []gguf.TensorInfo {
		return []gguf.TensorInfo{
			{Name: fmt.Sprintf("blk.%d.attn_q.weight", l), Type: gguf.TypeF16, Dims: []int64{64, 64}},
			{Name: fmt.Sprintf("blk.%d.ffn_gate_exps.weight", l), Type: gguf.TypeF16, Dims: []int64{64, 128, 4}},
			{Name: fmt.Sprintf("blk.%d.ffn_up_exps.weight", l), Type: gguf.TypeF16, Dims: []int64{64, 128, 4}},
			{Name: fmt.Sprintf("blk.%d.ffn_down_exps.weight", l), Type: gguf.TypeF16, Dims: []int64{128, 64, 4}},
		}
	}
	shards := [][]gguf.TensorInfo{
		append([]gguf.TensorInfo{{Name: "token_embd.weight", Type: gguf.TypeF16, Dims: []int64{64, 32}}}, exps(0)...),
		append(exps(1), gguf.TensorInfo{Name: "output_norm.weight", Type: gguf.TypeF32, Dims: []int64{64}},
			gguf.TensorInfo{Name: "output.weight", Type: gguf.TypeF16, Dims: []int64{64, 32}}),
	}
	var files []rundir.ModelFile
	for i, ts := range shards {
		path := gguf.ShardPath(prefix, i, len(shards))
		w := &gguf.Writer{Metadata: gguf.Metadata{{Key: "general.architecture", Value: "llama"},
			{Key: "split.no", Value: uint16(i)}, {Key: "split.count", Value: uint16(len(shards))}}, Tensors: ts}
		fd, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(fd, nil); err != nil {
			t.Fatal(err)
		}
		fd.Close()
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		files = append(files, rundir.ModelFile{Path: path, Dev: kernel.Dev(unix.Major(st.Dev), unix.Minor(st.Dev)), Ino: st.Ino})
	}
	var got []string
	p, err := Start(Config{Layers: true, Issued: func(is Issue) {
		got = append(got, fmt.Sprintf("%s/%d@%d", is.Tensor, is.Expert, strings.Index(is.Path, "-00002-")))
	}}, files, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	p.OnPicks(picks(1, 0, 2))
	p.OnPicks(picks(1, 1, 3))
	p.Close()
	// @-1: the first file; @N: the second.
	second := strings.Index(files[1].Path, "-00002-")
	var want []string
	for _, s := range expertSlices(0, 2) {
		want = append(want, s+"@-1")
	}
	want = append(want, fmt.Sprintf("blk.1.attn_q.weight/-1@%d", second))
	for _, s := range expertSlices(1, 3) {
		want = append(want, fmt.Sprintf("%s@%d", s, second))
	}
	want = append(want, fmt.Sprintf("output_norm.weight/-1@%d", second), fmt.Sprintf("output.weight/-1@%d", second))
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("asked for\n%v\nwant\n%v", got, want)
	}
}

// The report counts a late or evicted page as the major fault it was:
// the bytes of a race the graph won are one page, its cost a read-around.
func TestTheSummarySaysHowManyMajorFaultsTheLateAndEvictedPagesWere(t *testing.T) {
	ps := int64(kernel.PageSize)
	r := &rundir.Prefetched{AskedBytes: 100 * ps, ArrivedBytes: 96 * ps, LateBytes: 3 * ps, EvictedUnusedBytes: ps}
	got := Summary(r)
	for _, want := range []string{"late 0.0 MiB (3%; 3 major faults, each with its read-around)", "evicted unused 0.0 MiB (1%; 1 major faults)"} {
		if !strings.Contains(got, want) {
			t.Errorf("the summary lacks %q:\n%s", want, got)
		}
	}
}

// A major fault on a picked slice the prefetcher found cached, and so
// did not ask for, is counted as a picked slice's fault; begun after the
// ask it is a page evicted before its use, before the ask a fault the
// pick came too late for.
func TestAFaultOnASliceCachedWhenAskedIsAPageEvictedBeforeItsUse(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tc := range []struct {
		name           string
		beforeTheAsk   bool
		picked, cached uint64
	}{
		{"begun after the ask", false, 1, 1},
		{"begun before the ask", true, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mf, f := moeFile(t)
			if _, err := os.ReadFile(mf.Path); err != nil { // every slice cached
				t.Fatal(err)
			}
			p, err := Start(Config{}, []rundir.ModelFile{mf}, nil, true)
			if err != nil {
				t.Fatal(err)
			}
			before := monotonicNS()
			p.OnPicks(picks(1, 0, 1, 2))
			var gate *gguf.Tensor
			for _, tn := range f.TensorsByOffset() {
				if tn.Layer == 0 && tn.Role == "ffn_gate_exps" {
					gate = tn
				}
			}
			off, _ := gate.ExpertRange(2)
			e := &wire.FaultEvent{Dev: mf.Dev, Ino: mf.Ino, FileOff: uint64(off), Class: uint8(wire.FaultClassFAULT_MAJOR), StartTs: monotonicNS()}
			if tc.beforeTheAsk {
				e.StartTs = before
			}
			p.OnFault(e)
			rep := p.Close()
			if rep.AskedBytes != 0 || rep.ModelMajorFaults != 1 || rep.PickedMajorFaults != tc.picked || rep.CachedMajorFaults != tc.cached {
				t.Errorf("asked %d bytes; %d major faults, %d in picked slices, %d on cached pages; want 0, 1, %d, %d",
					rep.AskedBytes, rep.ModelMajorFaults, rep.PickedMajorFaults, rep.CachedMajorFaults, tc.picked, tc.cached)
			}
		})
	}
}
