// Interrupts: SIGINT (Ctrl-C), SIGTERM (kill, Slurm's pre-emption and time limit), SIGHUP (the terminal or ssh
// session closed; where it is ignored, as under nohup, it stays ignored) and SIGUSR1 / SIGUSR2 (Slurm's
// `--signal=[B:]USR1@SECONDS` warning ahead of the time limit; Open MPI's mpirun forwards both to every rank) ask the
// train job to stop after the current step. The job polls interrupt_signal() once per step and the ranks agree on it
// through the step's host-side loss all_reduce (src/jobs/train.cpp), so every rank leaves the loop after the same
// step, writes the checkpoint when one is configured and the record with status "interrupted" (exit code 4). The
// first signal is acknowledged on stderr at once (set_interrupt_announce).
// A second signal of any of these kinds stops the process at once with the signal's default action (the shell sees
// 128 + signal number; the record keeps status "running"). The same signal again within 250 ms counts as the first
// (Slurm signals every task and srun forwards the same signal to them: one request, delivered twice).
// Whatever ends the process on a signal (the second interrupt; SIGINT, SIGTERM, SIGHUP where no interrupt handler is
// installed) first removes the temporary file being written (set_pending_file), so no half-written file is left.
#pragma once

namespace trainer {

/// Installs the handlers for SIGINT, SIGTERM, SIGHUP (unless it is ignored), SIGUSR1 and SIGUSR2 (sigaction,
/// SA_RESTART). The first signal only records its number; the second restores the default action and raises it
/// again. Idempotent.
void install_interrupt_handlers();

/// At the very start of main (before MPI_Init, CUDA's start and the config, which take up to a second or so): each of
/// the five signals whose action is the default is recorded by the interrupt handler (no acknowledgement: the rank is
/// not known yet) until the job is known. A train job then calls install_interrupt_handlers() (a signal received
/// meanwhile stops it after its first step, with its record), anything else restore_early_interrupt_handlers().
void install_early_interrupt_handlers();
/// The default action back for each signal install_early_interrupt_handlers() took over (unless replaced since);
/// a signal received meanwhile then takes it (raised again): the process ends as if it had arrived now.
void restore_early_interrupt_handlers();

/// Whether the first signal writes its one-line acknowledgement to stderr at once ("trainer: SIGINT received:
/// stopping after the current step ..."); on by default. The train job keeps it to rank 0 (every rank with
/// --log-all-ranks), so that mpirun's forwarding to N ranks prints it once.
void set_interrupt_announce(bool on);

/// SIGPIPE ignored: a job that writes a record outlives a closed stdout or stderr (`trainer ... | head`, a log
/// reader that died); its writes there fail with EPIPE and are dropped, and the run still ends with its record and
/// checkpoints (by default SIGPIPE would end it at the next log line, its record left "running"). Idempotent.
void ignore_broken_pipe();

/// The number of the first interrupt signal received since install_interrupt_handlers(), 0 when none.
/// Async-signal-safe to read; local to this process (ranks agree through a collective, see above).
int interrupt_signal();

/// "SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", or "signal" for another number.
const char* interrupt_signal_name(int sig);

/// Names the temporary file this thread is writing (write_file_atomic; the path is copied, up to 4095 bytes): a signal
/// that ends the process removes it first. Each call installs that removal for SIGINT, SIGTERM and SIGHUP where their
/// action is the default (an interrupt handler installed before or after stays in charge, and removes it on the second
/// signal; an ignored signal stays ignored). Each thread has its own slot, held from its first write to its exit (8
/// such threads at once: a ninth's files are not covered), so a write on the failure listener's thread leaves the main
/// thread's file covered; a later call on the same thread replaces that thread's file.
void set_pending_file(const char* path);

/// Forgets this thread's pending file.
void clear_pending_file();

/// For tests: forget a received signal (the handlers stay installed).
void reset_interrupt();

}  // namespace trainer
