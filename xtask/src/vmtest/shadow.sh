cp ../recording/shadow.json shadow.json
numatrace replay ../recording/t.trace --json -o replay.json
