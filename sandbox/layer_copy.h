// Copying an overlay upper layer from the sandbox's sized tmpfs (--disk) to the run's
// directory on the host once the workload is gone: files, directories, links, whiteouts and
// opaque directories as overlayfs wrote them, nothing followed.
#pragma once

#include <string>

namespace sandgate::sandbox {

// Copies everything under the directory `from` into the (empty) directory `to`, both opened
// O_RDONLY|O_DIRECTORY, as their owner without any capability: a file or directory the
// workload made unreadable is made readable by its owner first (the copy gets the original
// mode). Whiteouts (0/0 character devices) are made again (the kernel lets anyone make them),
// user.overlay.* xattrs are copied, FIFOs and sockets are skipped. Returns "" or the failure.
std::string copyUpperLayer(int from, int to);

}  // namespace sandgate::sandbox
