/*
 * The kubelet lab's pause container (twill.local/pause:lab, built by
 * lab/images.ts with `gcc -static -O2`): the first process of every pod
 * sandbox. It only holds the pod's namespaces open, so it does nothing:
 * every signal is blocked and taken synchronously with sigwaitinfo(2).
 *   SIGINT, SIGTERM  exit 0 (the runtime stopping the sandbox)
 *   SIGCHLD          reap every exited child (with a shared PID namespace
 *                    it is the pod's init and inherits orphans)
 *   anything else    ignored
 * Blocked signals are queued even for a PID namespace's init, which the
 * kernel would otherwise spare every signal it has no handler for.
 * `pause -v` prints a version line and exits.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>

static void reap_children(void) {
  for (;;) {
    pid_t pid = waitpid(-1, NULL, WNOHANG);
    if (pid > 0) continue;
    if (pid < 0 && errno == EINTR) continue;
    return; /* 0: children left but none exited; -1 ECHILD: no children */
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "-v") == 0) {
    puts("twill-lab-pause 1");
    return 0;
  }

  /* A SIGCHLD disposition of SIG_IGN inherited through exec would make the
   * kernel reap on its own and never tell us; take the default back. */
  signal(SIGCHLD, SIG_DFL);

  sigset_t all;
  sigfillset(&all); /* SIGKILL and SIGSTOP cannot be blocked; the kernel skips them */
  if (sigprocmask(SIG_BLOCK, &all, NULL) != 0) {
    perror("pause: sigprocmask");
    return 1;
  }

  for (;;) {
    int sig = sigwaitinfo(&all, NULL);
    if (sig < 0) {
      if (errno == EINTR) continue;
      perror("pause: sigwaitinfo");
      return 1;
    }
    switch (sig) {
      case SIGINT:
      case SIGTERM:
        return 0;
      case SIGCHLD:
        reap_children();
        break;
      default:
        break;
    }
  }
}
