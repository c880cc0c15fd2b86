from precheck.commands.cli import program

program()
