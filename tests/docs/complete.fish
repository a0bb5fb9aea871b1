# Asks fish what it completes, with the completion autoloaded from a directory
# as fish does from vendor_completions.d:
#
#   fish --no-config complete.fish COMPLETIONS_DIR < LINES
#
# Each line of LINES is a command line, the cursor at its end; for each, prints
# the line, then every candidate (without its description), one a line,
# prefixed by "  ", then "--end".
set -p fish_complete_path $argv[1]
while read -l line
    echo $line
    for c in (complete --do-complete="$line")
        echo "  "(string split -m1 \t -- $c)[1]
    end
    echo -- --end
end
