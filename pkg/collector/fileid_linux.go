package collector

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/reconscope/reconscope/pkg/proc"
)

// statFileID is a file's identity from stat, with the device in the kernel's dev_t encoding.
func statFileID(f *os.File) (proc.KernelFileID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return proc.KernelFileID{}, fmt.Errorf("identify executable: %w", err)
	}
	return proc.KernelFileID{Dev: KernelDev(uint64(st.Dev)), Ino: st.Ino}, nil
}

// KernelDev turns a device number as stat reports it (glibc's new_encode_dev) into the kernel's
// internal dev_t (MAJOR << 20 | MINOR).
func KernelDev(statDev uint64) uint64 {
	return uint64(unix.Major(statDev))<<20 | uint64(unix.Minor(statDev))
}

func mmapPage(f *os.File) ([]byte, error) {
	m, err := unix.Mmap(int(f.Fd()), 0, os.Getpagesize(), unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("map: %w", err)
	}
	return m, nil
}

func munmap(m []byte) { _ = unix.Munmap(m) }
