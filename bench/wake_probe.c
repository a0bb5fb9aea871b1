/* What a one-shot waiter pays to stop watching a file with inotify.
 *
 *   wake_probe FILE    watch FILE (IN_MODIFY | IN_ATTRIB), touch it, read the
 *                      event, then close the inotify descriptor; prints the
 *                      nanoseconds close() took
 *
 * Closing the last descriptor of an inotify instance destroys its group, and the
 * kernel waits for an SRCU grace period there (fsnotify_destroy_group ->
 * fsnotify_wait_marks_destroyed). A process that exits with the descriptor open
 * pays the same in exit(), before its parent can reap it.
 *
 * Build: cc -O2 -o wake_probe wake_probe.c
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: wake_probe FILE\n");
    return 64;
  }
  int fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (fd < 0 || inotify_add_watch(fd, argv[1], IN_MODIFY | IN_ATTRIB) < 0) {
    perror("wake_probe: inotify");
    return 1;
  }
  int file = open(argv[1], O_RDONLY | O_CLOEXEC);
  if (file < 0 || futimens(file, NULL) != 0) {
    perror(argv[1]);
    return 1;
  }
  char buf[4096];
  if (read(fd, buf, sizeof buf) <= 0) {
    fprintf(stderr, "wake_probe: no event\n");
    return 1;
  }
  uint64_t t0 = now_ns();
  close(fd);
  uint64_t t1 = now_ns();
  printf("%llu\n", (unsigned long long)(t1 - t0));
  return 0;
}
