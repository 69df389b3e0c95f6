/* A program of a user's that passes itself off as another file: in a user namespace of its
 * own (where it holds CAP_SYS_ADMIN), it unmaps its own file and sets what /proc/PID/exe
 * shows to the file named by argv[1] (PR_SET_MM_MAP), then waits, its code running from
 * anonymous memory. Nothing of its user's is left mapped. x86-64 system calls.
 *
 * Usage: exe_swap FILE   (prints "ready PID" once it has asked for the swap) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/prctl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

struct job {
    unsigned long ranges[16][2]; /* the mappings of its own file */
    long count;
    struct prctl_mm_map map;
    long result;
};

#define RAW(n, a, b, c, d, e)                                                        \
    ({                                                                               \
        long _r;                                                                     \
        register long _d asm("r10") = (long)(d);                                     \
        register long _e asm("r8") = (long)(e);                                      \
        asm volatile("syscall"                                                       \
                     : "=a"(_r)                                                      \
                     : "a"((long)(n)), "D"((long)(a)), "S"((long)(b)),               \
                       "d"((long)(c)), "r"(_d), "r"(_e)                              \
                     : "rcx", "r11", "memory");                                      \
        _r;                                                                          \
    })

/* Copied to anonymous memory and run from there: system calls only, no call. */
__attribute__((noinline)) static void swap(struct job *job)
{
    for (long i = 0; i < job->count; i++)
        RAW(SYS_munmap, job->ranges[i][0], job->ranges[i][1] - job->ranges[i][0], 0, 0, 0);
    job->result = RAW(SYS_prctl, PR_SET_MM, PR_SET_MM_MAP, (long)&job->map, sizeof job->map, 0);
    for (;;)
        RAW(SYS_pause, 0, 0, 0, 0, 0);
}

static void own_mappings(struct job *job)
{
    char self[4096], line[4096];
    ssize_t length = readlink("/proc/self/exe", self, sizeof self - 1);
    self[length < 0 ? 0 : length] = 0;
    FILE *maps = fopen("/proc/self/maps", "r");
    while (fgets(line, sizeof line, maps) && job->count < 16) {
        unsigned long start, end;
        char path[4096] = "";
        int found = sscanf(line, "%lx-%lx %*s %*s %*s %*s %4095s", &start, &end, path);
        if (found == 3 && strcmp(path, self) == 0) {
            job->ranges[job->count][0] = start;
            job->ranges[job->count][1] = end;
            job->count++;
        }
    }
    fclose(maps);
}

static void current_layout(struct prctl_mm_map *map)
{
    char text[4096];
    unsigned long field[64] = {0};
    FILE *stat = fopen("/proc/self/stat", "r");
    if (!fgets(text, sizeof text, stat))
        exit(1);
    fclose(stat);
    int number = 3; /* the fields after the command's name, numbered as proc(5) does */
    for (char *word = strtok(strrchr(text, ')') + 2, " "); word && number < 64; number++) {
        field[number] = strtoul(word, 0, 10);
        word = strtok(NULL, " ");
    }
    map->start_code = field[26];
    map->end_code = field[27];
    map->start_stack = field[28];
    map->start_data = field[45];
    map->end_data = field[46];
    map->start_brk = field[47];
    map->brk = (unsigned long)sbrk(0);
    map->arg_start = field[48];
    map->arg_end = field[49];
    map->env_start = field[50];
    map->env_end = field[51];
}

int main(int argc, char **argv)
{
    int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS;
    struct job *job = mmap(0, sizeof *job, prot, flags, -1, 0);
    if (argc != 2 || unshare(CLONE_NEWUSER) != 0) {
        perror("unshare");
        return 1;
    }
    own_mappings(job);
    current_layout(&job->map);
    job->map.exe_fd = open(argv[1], O_RDONLY);
    void *code = mmap(0, 8192, prot | PROT_EXEC, flags, -1, 0);
    memcpy(code, (void *)swap, 4096);
    printf("ready %d\n", getpid());
    fflush(stdout);
    ((void (*)(struct job *))code)(job);
    return 0;
}
