/* The runtime's part for aarch64 Linux JIT images, under qemu (after `walk.c`): handlers
 * entered with x0 and x1 for the payload, faults caught by a signal handler in a forked
 * child per call, `tail` functions (whose first integer is x2) called through a shim. */
#include <signal.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

__attribute__((noreturn)) static void resume(uint64_t pc, uint64_t sp, uint64_t fp, int64_t payload) {
  register uint64_t x9 __asm__("x9") = pc;
  register uint64_t x10 __asm__("x10") = sp;
  register uint64_t x11 __asm__("x11") = fp;
  register int64_t x12 __asm__("x12") = payload;
  __asm__ volatile("mov sp, x10\n\tmov x29, x11\n\tmov x0, x12\n\tmov x1, xzr\n\tbr x9"
                   : : "r"(x9), "r"(x10), "r"(x11), "r"(x12) : "memory");
  __builtin_unreachable();
}

/* `throw(tag)` is called in the `tail` convention, whose first integer is x2, and keeps
 * the caller's frame pointer and return address for `throw_from_tail`'s frame record.
 * `call_tail(f, x)` calls a `tail` function of one integer, which it returns in x2. */
__asm__(".text\n"
        ".global throw_entry\n"
        ".type throw_entry, %function\n"
        "throw_entry:\n"
        "\tmov x0, x2\n"
        "\tb throw_from_tail\n"
        ".global call_tail\n"
        ".type call_tail, %function\n"
        "call_tail:\n"
        "\tstp x29, x30, [sp, #-16]!\n"
        "\tmov x29, sp\n"
        "\tmov x9, x0\n"
        "\tmov x2, x1\n"
        "\tblr x9\n"
        "\tmov x0, x2\n"
        "\tldp x29, x30, [sp], #16\n"
        "\tret\n");
void throw_entry(void);
int64_t call_tail(uint64_t f, int64_t x);

static void on_fault(int signal, siginfo_t *info, void *context) {
  (void)info;
  ucontext_t *uc = context;
  char line[64];
  int n = snprintf(line, sizeof line, "F %d %llx\n", signal, (unsigned long long)uc->uc_mcontext.pc);
  if (write(1, line, n) != n) _exit(2);
  _exit(0);
}

static int64_t invoke(const struct call *c) {
  int64_t x = argument(c);
  return c->tail ? call_tail(c->entry, x) : ((int64_t(*)(int64_t))(uintptr_t)c->entry)(x);
}

int main(void) {
  load_image();
  setvbuf(stdout, NULL, _IONBF, 0);
  for (int i = 0; i < (int)(sizeof CALLS / sizeof CALLS[0]); i++) {
    const struct call *c = &CALLS[i];
    if (!c->fork) {
      returned(invoke(c));
      continue;
    }
    pid_t pid = fork();
    if (pid == 0) {
      struct sigaction action;
      memset(&action, 0, sizeof action);
      action.sa_sigaction = on_fault;
      action.sa_flags = SA_SIGINFO;
      int faults[] = {SIGILL, SIGSEGV, SIGBUS, SIGFPE, SIGTRAP};
      for (int j = 0; j < 5; j++) sigaction(faults[j], &action, NULL);
      alarm(20);
      printf("R %lld W\n", (long long)invoke(c));
      _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) printf("X %d\n", status);
  }
  return 0;
}
