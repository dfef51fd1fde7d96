// CPU threads are explicit: every command takes --threads N (0 = all cores this process may use).
#pragma once

namespace vitpipe {

int available_cores();                 // cores in this process's affinity mask
int configure_threads(int requested);  // sets OpenMP (and so oneDNN) thread count; returns the count in effect
int configured_threads();

}  // namespace vitpipe
