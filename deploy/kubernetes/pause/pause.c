/*
 * The pod sandbox's process: holds the pod's namespaces, reaps children,
 * and ends on SIGINT or SIGTERM, as Kubernetes' own pause does. Built
 * static into the image deploy/kubernetes/check.sh imports as the sandbox
 * image (no registry is reachable where the checks run).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) {
    (void)sig;
    _exit(0);
}

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    if (getpid() != 1) {
        fprintf(stderr, "pause: not the pod's first process\n");
    }
    struct sigaction on_stop = {.sa_handler = stop};
    struct sigaction on_child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
    if (sigaction(SIGINT, &on_stop, NULL) < 0 || sigaction(SIGTERM, &on_stop, NULL) < 0 ||
        sigaction(SIGCHLD, &on_child, NULL) < 0) {
        return 1;
    }
    for (;;) {
        pause();
    }
}
