/* The sandbox ("pause") image's only program, built static by tests/runtimes/cri.rs: it holds the pod's
 * namespaces open until it is told to stop, and reaps what would otherwise be zombies, as
 * Kubernetes' own pause does. No registry is reachable here, so the image is made locally. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, NULL, WNOHANG) > 0) {} }

int main(void) {
  struct sigaction sa = {0};
  sa.sa_handler = stop;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sa.sa_handler = reap;
  sa.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, NULL);
  for (;;) pause();
}
