package trace

import "testing"

// What each runtime call means to every reader: VMM mappings are device memory, reservations are not,
// and the stream a call enqueued on is found in the argument its prototype puts it.
func TestClassOfAndStream(t *testing.T) {
	for _, tc := range []struct {
		name   string
		class  Class
		args   [6]uint64
		stream uint64
		enq    bool
	}{
		{"aclrtMalloc", ClassDeviceAlloc, [6]uint64{}, 0, false},
		{"aclrtMapMem", ClassDeviceAlloc, [6]uint64{}, 0, false},
		{"aclrtUnmapMem", ClassDeviceFree, [6]uint64{}, 0, false},
		{"aclrtFree", ClassDeviceFree, [6]uint64{}, 0, false},
		{"aclrtReserveMemAddress", ClassReserve, [6]uint64{}, 0, false},
		{"aclrtReleaseMemAddress", ClassReserveRelease, [6]uint64{}, 0, false},
		{"aclrtMallocPhysical", ClassOther, [6]uint64{}, 0, false},
		{"aclnnMul", ClassLaunch, [6]uint64{1, 2, 3, 0x51, 3}, 0x51, true},
		{"aclnnMulGetWorkspaceSize", ClassOther, [6]uint64{}, 0, false},
		{"aclrtMemcpyAsync", ClassCopyAsync, [6]uint64{1, 2, 3, 2, 3, 0x52}, 0x52, true},
		{"aclrtMemsetAsync", ClassMemsetAsync, [6]uint64{1, 2, 0, 2, 0x53}, 0x53, true},
		{"aclrtRecordEvent", ClassEventRecord, [6]uint64{0xe, 0x54}, 0x54, true},
		{"aclrtResetEvent", ClassEventRecord, [6]uint64{0xe, 0x55}, 0x55, true},
		{"aclrtStreamWaitEvent", ClassStreamWait, [6]uint64{0x56, 0xe}, 0x56, true},
		{"aclrtDestroyStreamForce", ClassStreamDestroy, [6]uint64{}, 0, false},
		{"aclrtSynchronizeStream", ClassOther, [6]uint64{0x57}, 0, false},
	} {
		c := ClassOf(tc.name)
		if c != tc.class {
			t.Errorf("ClassOf(%s) = %d, want %d", tc.name, c, tc.class)
		}
		if s, ok := c.Stream(tc.args); ok != tc.enq || s != tc.stream {
			t.Errorf("%s: Stream = %#x, %v; want %#x, %v", tc.name, s, ok, tc.stream, tc.enq)
		}
	}
}
